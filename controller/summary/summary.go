// Package summary derives the state of BundleDeployments and aggregates
// them for Bundles, Clusters and ClusterGroups: pure functions, table-tested.
package summary

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// maxListed bounds the names listed in summaries.
const maxListed = 10

// State derives a BundleDeployment's state, worst first: not yet applied
// (ErrApplied when the apply failed or dependsOn forms a cycle,
// WaitApplied otherwise: waiting for content or for dependencies), NotReady,
// OutOfSync (a paused change waits), Modified (drift), Ready.
func State(bd *fleet.BundleDeployment) fleet.BundleState {
	st := &bd.Status
	if bd.Spec.DeploymentID != st.AppliedDeploymentID {
		if c := meta.FindStatusCondition(st.Conditions, fleet.DeployedCondition); c != nil && c.Status == metav1.ConditionFalse &&
			c.ObservedGeneration == bd.Generation && c.Reason != fleet.WaitingReason && c.Reason != fleet.WaitingForContentReason &&
			c.Reason != fleet.WaitingForDependencyReason {
			return fleet.ErrApplied
		}
		return fleet.WaitApplied
	}
	if !st.Ready {
		return fleet.NotReady
	}
	if bd.Spec.StagedDeploymentID != "" && bd.Spec.StagedDeploymentID != bd.Spec.DeploymentID {
		return fleet.OutOfSync
	}
	if !st.NonModified {
		return fleet.Modified
	}
	return fleet.Ready
}

// Message is a short reason for a non-ready BundleDeployment.
func Message(bd *fleet.BundleDeployment) string {
	if c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ReadyCondition); c != nil && c.Message != "" {
		return c.Message
	}
	if c := meta.FindStatusCondition(bd.Status.Conditions, fleet.DeployedCondition); c != nil && c.Message != "" {
		return c.Message
	}
	return ""
}

// Summarize counts BundleDeployments by state.
func Summarize(bds []fleet.BundleDeployment) fleet.BundleSummary {
	s := fleet.BundleSummary{DesiredReady: len(bds)}
	for i := range bds {
		bd := &bds[i]
		state := State(bd)
		switch state {
		case fleet.Ready:
			s.Ready++
		case fleet.NotReady:
			s.NotReady++
		case fleet.WaitApplied:
			s.WaitApplied++
		case fleet.ErrApplied:
			s.ErrApplied++
		case fleet.OutOfSync:
			s.OutOfSync++
		case fleet.Modified:
			s.Modified++
		case fleet.Pending:
			s.Pending++
		}
		if state != fleet.Ready && len(s.NonReadyResources) < maxListed {
			s.NonReadyResources = append(s.NonReadyResources, fleet.NonReadyResource{
				Name:           bd.Namespace + "/" + bd.Name,
				State:          state,
				Message:        Message(bd),
				ModifiedStatus: head(bd.Status.ModifiedStatus, 3),
				NonReadyStatus: head(bd.Status.NonReadyStatus, 3),
			})
		}
	}
	sort.Slice(s.NonReadyResources, func(i, j int) bool { return s.NonReadyResources[i].Name < s.NonReadyResources[j].Name })
	return s
}

func head[T any](s []T, n int) []T {
	if len(s) > n {
		return append([]T(nil), s[:n]...)
	}
	return append([]T(nil), s...)
}

// WorstState is the worst state with a non-zero count, or "" when all are
// ready.
func WorstState(s fleet.BundleSummary) fleet.BundleState {
	counts := map[fleet.BundleState]int{
		fleet.ErrApplied: s.ErrApplied, fleet.WaitApplied: s.WaitApplied, fleet.Modified: s.Modified,
		fleet.OutOfSync: s.OutOfSync, fleet.Pending: s.Pending, fleet.NotReady: s.NotReady,
	}
	var worst fleet.BundleState
	for state, n := range counts {
		if n > 0 && (worst == "" || fleet.StateRank[state] > fleet.StateRank[worst]) {
			worst = state
		}
	}
	return worst
}

// ReadyMessage says which BundleDeployments are not ready and why, for a
// Ready=False condition: "NotReady(2) [a/b: ..., ...]; Modified(1) [...]".
func ReadyMessage(s fleet.BundleSummary) string {
	byState := map[fleet.BundleState][]string{}
	for _, r := range s.NonReadyResources {
		entry := r.Name
		if r.Message != "" {
			entry += ": " + r.Message
		}
		byState[r.State] = append(byState[r.State], entry)
	}
	counts := map[fleet.BundleState]int{
		fleet.ErrApplied: s.ErrApplied, fleet.WaitApplied: s.WaitApplied, fleet.Modified: s.Modified,
		fleet.OutOfSync: s.OutOfSync, fleet.Pending: s.Pending, fleet.NotReady: s.NotReady,
	}
	states := []fleet.BundleState{fleet.ErrApplied, fleet.WaitApplied, fleet.Modified, fleet.OutOfSync, fleet.Pending, fleet.NotReady}
	var parts []string
	for _, st := range states {
		if counts[st] == 0 {
			continue
		}
		p := fmt.Sprintf("%s(%d)", st, counts[st])
		if names := byState[st]; len(names) > 0 {
			p += " [" + strings.Join(names, "; ") + "]"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// ResourceCounts sums the BundleDeployments' resourceCounts, as Fleet sums
// them for GitRepos and Clusters.
func ResourceCounts(bds []fleet.BundleDeployment) fleet.ResourceCounts {
	var c fleet.ResourceCounts
	for i := range bds {
		c.Add(bds[i].Status.ResourceCounts)
	}
	return c
}
