// Package names computes the names of generated objects (shared/SPEC.md §2).
// They are part of the contract with Fleet: change nothing here.
package names

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxNameLength is the longest Kubernetes name that is also a DNS label.
const MaxNameLength = 63

// KeyHash returns the first 12 hex digits of the sha256 of the first 100
// characters of s.
func KeyHash(s string) string {
	if len(s) > 100 {
		s = s[:100]
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:12]
}

// SafeConcatName joins parts with "-". A result longer than 63 characters is
// cut and given a hash suffix of the whole, so distinct inputs keep distinct
// names.
func SafeConcatName(parts ...string) string {
	name := strings.Join(parts, "-")
	if len(name) < MaxNameLength+1 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := hex.EncodeToString(sum[:])[:5]
	cut := name[:57]
	if c := cut[len(cut)-1]; !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
		cut = cut[:56]
		suffix = hex.EncodeToString(sum[:])[:6]
	}
	return cut + "-" + suffix
}

// ClusterNamespace is the upstream per-cluster namespace of Cluster ns/name.
func ClusterNamespace(namespace, name string) string {
	return SafeConcatName("cluster", namespace, name, KeyHash(namespace+"::"+name))
}

// AutoClusterName is the name of a Cluster created for an agent whose
// clientID matched none.
func AutoClusterName(clientID string) string {
	return "cluster-" + KeyHash(clientID)
}

// CredentialSecret is the name of the Secret that hands a registration its
// credential.
func CredentialSecret(clientID, clientRandom string) string {
	sum := sha256.Sum256([]byte(clientID + clientRandom))
	name := "c-" + hex.EncodeToString(sum[:])
	return name[:MaxNameLength]
}

// ImportToken is the ClusterRegistrationToken made for a manager-initiated
// Cluster.
func ImportToken(cluster string) string {
	return SafeConcatName("import-token", cluster)
}

// AgentBundle is the Bundle that holds a Cluster's agent.
func AgentBundle(cluster string) string {
	return SafeConcatName("fleet-agent", cluster)
}

// CredentialAccess names the Role and RoleBinding in the shared system
// registration namespace that let a ClusterRegistration's import identity
// read its credential Secret. The hash of namespace + "::" + name comes
// first, so ("a-b", "c") and ("a", "b-c") never share a name, even when a
// long name is cut.
func CredentialAccess(namespace, name string) string {
	return SafeConcatName("creds", KeyHash(namespace+"::"+name), namespace, name)
}
