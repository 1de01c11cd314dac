package deployer

import (
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

func TestResourceCounts(t *testing.T) {
	res := func(names ...string) []fleet.BundleDeploymentResource {
		var out []fleet.BundleDeploymentResource
		for _, n := range names {
			out = append(out, fleet.BundleDeploymentResource{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: n})
		}
		return out
	}
	nr := func(n, kstatus string) fleet.NonReadyStatus {
		return fleet.NonReadyStatus{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: n, Summary: fleet.SummaryOf(kstatus, "")}
	}
	mod := func(n string, missing bool) fleet.ModifiedStatus {
		return fleet.ModifiedStatus{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: n, Create: missing}
	}
	cases := []struct {
		name     string
		all      []fleet.BundleDeploymentResource
		nonReady []fleet.NonReadyStatus
		modified []fleet.ModifiedStatus
		want     fleet.ResourceCounts
	}{
		{"all ready", res("a", "b"), nil, nil, fleet.ResourceCounts{Ready: 2, DesiredReady: 2}},
		{"one not ready", res("a", "b"), []fleet.NonReadyStatus{nr("b", "InProgress")}, nil, fleet.ResourceCounts{Ready: 1, NotReady: 1, DesiredReady: 2}},
		{"deleted downstream: missing once, though health says not found too", res("a", "b"),
			[]fleet.NonReadyStatus{nr("b", "NotFound")}, []fleet.ModifiedStatus{mod("b", true)}, fleet.ResourceCounts{Ready: 1, Missing: 1, DesiredReady: 2}},
		{"not found by health only", res("a"), []fleet.NonReadyStatus{nr("a", "NotFound")}, nil, fleet.ResourceCounts{Missing: 1, DesiredReady: 1}},
		{"modified and not ready: modified", res("a"), []fleet.NonReadyStatus{nr("a", "InProgress")}, []fleet.ModifiedStatus{mod("a", false)}, fleet.ResourceCounts{Modified: 1, DesiredReady: 1}},
		{"orphaned: not desired", res("a"), nil, []fleet.ModifiedStatus{{Kind: "ConfigMap", Name: "z", Delete: true}}, fleet.ResourceCounts{Ready: 1, Orphaned: 1, DesiredReady: 1}},
	}
	for _, c := range cases {
		if got := resourceCounts(c.all, c.nonReady, c.modified); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestStatusCountsBeyondTheListedTen: nonReadyStatus keeps 10 entries and
// says it is incomplete; resourceCounts counts every resource.
func TestStatusCountsBeyondTheListedTen(t *testing.T) {
	var all []fleet.BundleDeploymentResource
	var nonReady []fleet.NonReadyStatus
	for i := range 12 {
		n := string(rune('a' + i))
		all = append(all, fleet.BundleDeploymentResource{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: n})
		nonReady = append(nonReady, fleet.NonReadyStatus{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: n, Summary: fleet.SummaryOf("InProgress", "")})
	}
	st := computeStatus(fleet.BundleDeploymentStatus{}, observation{DeploymentID: "m:o", Applied: true, Monitored: true, Resources: all, NonReady: nonReady})
	if len(st.NonReadyStatus) != maxListed || !st.IncompleteState || st.ResourceCounts.NotReady != 12 || st.ResourceCounts.DesiredReady != 12 {
		t.Errorf("listed %d, incomplete %v, counts %+v", len(st.NonReadyStatus), st.IncompleteState, st.ResourceCounts)
	}
}
