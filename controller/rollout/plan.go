// Package rollout stages a change that rolls every agent: a new agent
// chart shipped with a controller upgrade, or an agent setting in the
// controller configuration. Each such revision gets an AgentRollout; its
// reconciler plans the Clusters into waves (an optional canary, then waves
// bounded by maxUnavailable), admits them one wave at a time once the
// previous wave's agents run the new revision and are Ready, halts a wave
// that misses its deadline and, with autoRollback, puts its Clusters back
// on the previous revision. The Cluster reconciler asks the Gate what to
// render a Cluster's agent from; it stays the only writer of agent Bundles.
//
// The plan and the progress are pure functions of what the reconciler
// reads (Plan, Progress), table-tested without an API server.
package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
)

// Candidate is a Cluster with an agent Bundle, as the planner sees it.
type Candidate struct {
	// Key is "namespace/name".
	Key    string
	Labels map[string]string
	// Current is set when its agent Bundle is on the new revision already.
	Current bool
}

// Plan orders the Clusters into waves: the canary first (the Clusters its
// selector matches, or its count of Clusters, preferring those still to
// update), then waves of maxUnavailable. The order inside is a hash of the
// key, so a wave mixes workspaces and the same set always gives the same
// plan. Without a strategy there is one wave.
func Plan(cands []Candidate, s *fleet.AgentRolloutStrategy) ([]fleet.AgentRolloutWave, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	ordered := append([]Candidate(nil), cands...)
	sort.Slice(ordered, func(i, j int) bool {
		hi, hj := orderKey(ordered[i].Key), orderKey(ordered[j].Key)
		if hi != hj {
			return hi < hj
		}
		return ordered[i].Key < ordered[j].Key
	})
	var waves []fleet.AgentRolloutWave
	rest := ordered
	if s != nil && s.Canary != nil {
		var canary []string
		canary, rest = pickCanary(ordered, s.Canary)
		if len(canary) > 0 {
			waves = append(waves, fleet.AgentRolloutWave{Canary: true, Clusters: canary})
		}
	}
	size, err := config.RolloutWaveSize(s, len(ordered))
	if err != nil {
		return nil, err
	}
	for len(rest) > 0 {
		n := min(size, len(rest))
		w := fleet.AgentRolloutWave{Clusters: make([]string, 0, n)}
		for _, c := range rest[:n] {
			w.Clusters = append(w.Clusters, c.Key)
		}
		waves = append(waves, w)
		rest = rest[n:]
	}
	return waves, nil
}

func pickCanary(ordered []Candidate, c *fleet.AgentRolloutCanary) (canary []string, rest []Candidate) {
	if c.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(c.Selector)
		if err != nil {
			// Validated with the configuration; a bad one picks nobody.
			sel = labels.Nothing()
		}
		for _, cand := range ordered {
			if sel.Matches(labels.Set(cand.Labels)) {
				canary = append(canary, cand.Key)
			} else {
				rest = append(rest, cand)
			}
		}
		return canary, rest
	}
	// By count: Clusters that still have to update make the better canary.
	picked := map[string]bool{}
	for pass := 0; pass < 2 && len(canary) < int(c.Count); pass++ {
		for _, cand := range ordered {
			if len(canary) == int(c.Count) {
				break
			}
			if !picked[cand.Key] && cand.Current == (pass == 1) {
				picked[cand.Key] = true
				canary = append(canary, cand.Key)
			}
		}
	}
	for _, cand := range ordered {
		if !picked[cand.Key] {
			rest = append(rest, cand)
		}
	}
	return canary, rest
}

func orderKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// Planned reports the wave a Cluster is planned in, or -1.
func Planned(waves []fleet.AgentRolloutWave, key string) int {
	for i, w := range waves {
		for _, k := range w.Clusters {
			if k == key {
				return i
			}
		}
	}
	return -1
}
