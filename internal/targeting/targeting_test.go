package targeting

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

func sel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func TestMatch(t *testing.T) {
	prod := fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-1", Labels: map[string]string{"env": "prod", "region": "eu"}}}
	prodUS := fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-2", Labels: map[string]string{"env": "prod", "region": "us"}}}
	dev := fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "dev-1", Labels: map[string]string{"env": "dev"}}}
	groups := []fleet.ClusterGroup{
		{ObjectMeta: metav1.ObjectMeta{Name: "eu", Labels: map[string]string{"tier": "gold"}}, Spec: fleet.ClusterGroupSpec{Selector: sel("region", "eu")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "none"}},
	}
	cases := []struct {
		name   string
		target fleet.BundleTarget
		c      fleet.Cluster
		want   bool
	}{
		{"by name", fleet.BundleTarget{ClusterName: "prod-1"}, prod, true},
		{"by other name", fleet.BundleTarget{ClusterName: "prod-1"}, dev, false},
		{"by labels", fleet.BundleTarget{ClusterSelector: sel("env", "prod")}, prod, true},
		{"by labels, no match", fleet.BundleTarget{ClusterSelector: sel("env", "prod")}, dev, false},
		{"empty selector selects all", fleet.BundleTarget{ClusterSelector: &metav1.LabelSelector{}}, dev, true},
		{"by group", fleet.BundleTarget{ClusterGroup: "eu"}, prod, true},
		{"by group, not a member", fleet.BundleTarget{ClusterGroup: "eu"}, dev, false},
		{"group without selector selects none", fleet.BundleTarget{ClusterGroup: "none"}, prod, false},
		{"group that does not exist selects none", fleet.BundleTarget{ClusterGroup: "gone"}, prod, false},
		{"by group labels", fleet.BundleTarget{ClusterGroupSelector: sel("tier", "gold")}, prod, true},
		{"by group labels, not a member", fleet.BundleTarget{ClusterGroupSelector: sel("tier", "gold")}, prodUS, false},
		{"name and labels both needed", fleet.BundleTarget{ClusterName: "prod-1", ClusterSelector: sel("env", "dev")}, prod, false},
		{"labels and group: in both", fleet.BundleTarget{ClusterSelector: sel("env", "prod"), ClusterGroup: "eu"}, prod, true},
		{"labels and group: labels only", fleet.BundleTarget{ClusterSelector: sel("env", "prod"), ClusterGroup: "eu"}, prodUS, false},
		{"labels and group: neither", fleet.BundleTarget{ClusterSelector: sel("env", "prod"), ClusterGroup: "eu"}, dev, false},
		{"no criteria selects nothing", fleet.BundleTarget{Name: "empty"}, prod, false},
	}
	for _, tc := range cases {
		b := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: []fleet.BundleTarget{tc.target}}}
		for _, given := range []bool{false, true} {
			got, err := Match(b, &tc.c, Groups{Items: groups, Given: given})
			var missing *MissingGroupsError
			if given && tc.target.ClusterGroup == "gone" && errors.As(err, &missing) {
				continue // given groups: a named group not given is an error, tested below
			}
			if err != nil {
				t.Fatalf("%s (given %v): %v", tc.name, given, err)
			}
			if (got != nil) != tc.want {
				t.Errorf("%s (given %v): matched=%v, want %v", tc.name, given, got != nil, tc.want)
			}
		}
	}
	bad := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Like"}}}}}}}
	if _, err := Match(bad, &prod, Groups{}); err == nil || !strings.HasPrefix(err.Error(), "spec.targets[0].clusterSelector") {
		t.Errorf("an invalid selector must be an error naming the target: %v", err)
	}
}

// The first target that selects the cluster wins; a target that does not
// apply is skipped whatever its options.
func TestMatch_FirstMatchingTargetWins(t *testing.T) {
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-1", Labels: map[string]string{"env": "prod"}}}
	b := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: []fleet.BundleTarget{
		{Name: "dev", ClusterSelector: sel("env", "dev")},
		{Name: "prod", ClusterSelector: sel("env", "prod")},
		{Name: "all", ClusterSelector: &metav1.LabelSelector{}},
	}}}
	got, err := Match(b, c, Groups{})
	if err != nil || got == nil || got.Name != "prod" {
		t.Fatalf("matched %+v (%v), want target prod", got, err)
	}
}

// With the groups someone handed over (fleet render bundle --group), a
// target that needs a group that was not given fails clearly, but only when
// the target is consulted at all: an earlier target that selects the
// cluster, or a name or selector that already rules it out, needs no group.
func TestMatch_GivenGroupsMustHoldWhatATargetNeeds(t *testing.T) {
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-1", Labels: map[string]string{"env": "prod", "region": "eu"}}}
	eu := fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: "eu"}, Spec: fleet.ClusterGroupSpec{Selector: sel("region", "eu")}}
	mixed := fleet.BundleTarget{Name: "eu-prod", ClusterSelector: sel("env", "prod"), ClusterGroup: "eu"}
	byGroupLabels := fleet.BundleTarget{Name: "gold", ClusterGroupSelector: sel("tier", "gold")}
	for _, tc := range []struct {
		name    string
		targets []fleet.BundleTarget
		groups  []fleet.ClusterGroup
		missing *MissingGroupsError // nil: no error
		want    string              // target matched
	}{
		{"named group not given", []fleet.BundleTarget{mixed}, nil, &MissingGroupsError{Target: 0, Group: "eu"}, ""},
		{"named group given", []fleet.BundleTarget{mixed}, []fleet.ClusterGroup{eu}, nil, "eu-prod"},
		{"group selector with no group given", []fleet.BundleTarget{byGroupLabels}, nil, &MissingGroupsError{Target: 0}, ""},
		{"group selector with groups given", []fleet.BundleTarget{byGroupLabels}, []fleet.ClusterGroup{eu}, nil, ""},
		{"earlier target selects", []fleet.BundleTarget{{Name: "by-name", ClusterName: "prod-1"}, mixed}, nil, nil, "by-name"},
		{"selector rules the cluster out", []fleet.BundleTarget{{Name: "dev-eu", ClusterSelector: sel("env", "dev"), ClusterGroup: "eu"}}, nil, nil, ""},
		{"second target needs it", []fleet.BundleTarget{{Name: "other", ClusterName: "other"}, mixed}, nil, &MissingGroupsError{Target: 1, Group: "eu"}, ""},
	} {
		b := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: tc.targets}}
		got, err := Match(b, c, Groups{Items: tc.groups, Given: true})
		var missing *MissingGroupsError
		switch {
		case tc.missing != nil:
			if !errors.As(err, &missing) || *missing != *tc.missing {
				t.Errorf("%s: error %v, want %+v", tc.name, err, tc.missing)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "" && got != nil, tc.want != "" && (got == nil || got.Name != tc.want):
			t.Errorf("%s: matched %+v, want %q", tc.name, got, tc.want)
		}
	}
	err := error(&MissingGroupsError{Target: 2, Group: "eu"})
	if want := "spec.targets[2] needs ClusterGroup eu to decide whether it selects the cluster: give its YAML (--group FILE)"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}
