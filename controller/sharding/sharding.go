// Package sharding splits the work of several controller replicas: each
// replica runs with a shard (index i of n) and reconciles only the objects
// that hash to it, with a leader election of its own, so n replicas share
// the clusters between them. A Cluster can be pinned to a shard with the
// label fleet.cattle.io/shard-id.
package sharding

import (
	"fmt"
	"hash/fnv"
	"strconv"
)

// Shard is one replica's share: index Index of Count. The zero value (and
// Count <= 1) owns everything.
type Shard struct {
	Index int
	Count int
}

// Validate reports an impossible shard.
func (s Shard) Validate() error {
	if s.Count < 0 || s.Index < 0 || (s.Count > 0 && s.Index >= s.Count) {
		return fmt.Errorf("shard %d of %d: the index must be in [0, count)", s.Index, s.Count)
	}
	return nil
}

// Enabled reports whether work is split.
func (s Shard) Enabled() bool { return s.Count > 1 }

// OwnsKey reports whether the shard owns the object with this key (for
// example "namespace/name", or "namespace/clientID" for registrations).
func (s Shard) OwnsKey(key string) bool {
	if !s.Enabled() {
		return true
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32()%uint32(s.Count)) == s.Index
}

// OwnsCluster reports whether the shard owns a Cluster: the shard named by
// its fleet.cattle.io/shard-id label, else the hash of namespace/clientID
// (namespace/name while it has no clientID yet). Registrations hash the same
// way, so a cluster and its registrations land on one shard.
func (s Shard) OwnsCluster(namespace, name, clientID string, labels map[string]string) bool {
	if !s.Enabled() {
		return true
	}
	if v, ok := labels["fleet.cattle.io/shard-id"]; ok {
		if i, err := strconv.Atoi(v); err == nil && i >= 0 {
			return i%s.Count == s.Index
		}
	}
	if clientID != "" {
		return s.OwnsKey(namespace + "/" + clientID)
	}
	return s.OwnsKey(namespace + "/" + name)
}

// LeaseName is the leader election Lease of the shard.
func (s Shard) LeaseName(base string) string {
	if !s.Enabled() {
		return base
	}
	return fmt.Sprintf("%s-shard-%d-of-%d", base, s.Index, s.Count)
}
