package targeting

import (
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

func targetNames(ts []*fleet.BundleTarget) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

// FirstMatch (the default, also when the mode is empty) takes the first
// selecting target only; AllMatches takes every selecting target in order;
// in either mode a selecting target with doNotDeploy keeps the Bundle away
// (AllMatches: whichever of them has it).
func TestMatchAll_CustomizationModes(t *testing.T) {
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-1", Labels: map[string]string{"env": "prod", "region": "eu"}}}
	targets := []fleet.BundleTarget{
		{Name: "dev", ClusterSelector: sel("env", "dev")},
		{Name: "prod", ClusterSelector: sel("env", "prod")},
		{Name: "eu", ClusterSelector: sel("region", "eu")},
		{Name: "all", ClusterSelector: &metav1.LabelSelector{}},
	}
	noEU := slices.Clone(targets)
	noEU[2].DoNotDeploy = true
	for _, tc := range []struct {
		name      string
		mode      fleet.TargetCustomizationMode
		targets   []fleet.BundleTarget
		wantAll   []string
		wantMatch string
		doNot     bool
	}{
		{"empty mode is FirstMatch", "", targets, []string{"prod"}, "prod", false},
		{"FirstMatch", fleet.TargetCustomizationModeFirstMatch, targets, []string{"prod"}, "prod", false},
		{"AllMatches", fleet.TargetCustomizationModeAllMatches, targets, []string{"prod", "eu", "all"}, "prod", false},
		{"AllMatches with a doNotDeploy among them", fleet.TargetCustomizationModeAllMatches, noEU, []string{"prod", "eu", "all"}, "eu", true},
		{"FirstMatch ignores a later doNotDeploy", fleet.TargetCustomizationModeFirstMatch, noEU, []string{"prod"}, "prod", false},
		{"AllMatches, nothing selects", fleet.TargetCustomizationModeAllMatches, targets[:1], nil, "", false},
	} {
		b := &fleet.Bundle{Spec: fleet.BundleSpec{TargetCustomizationMode: tc.mode, Targets: tc.targets}}
		all, err := MatchAll(b, c, Groups{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := targetNames(all); !slices.Equal(got, tc.wantAll) {
			t.Errorf("%s: MatchAll = %v, want %v", tc.name, got, tc.wantAll)
		}
		m, err := Match(b, c, Groups{})
		switch {
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantMatch == "" && m != nil, tc.wantMatch != "" && (m == nil || m.Name != tc.wantMatch || m.DoNotDeploy != tc.doNot):
			t.Errorf("%s: Match = %+v, want %q (doNotDeploy %v)", tc.name, m, tc.wantMatch, tc.doNot)
		}
	}
}

// targetRestrictions are an allow list: a target selects only clusters one
// restriction selects too, whatever the target says, by the same rules
// (name, labels, group, group labels); no restrictions allow everything.
func TestMatch_TargetRestrictionsLimitTargets(t *testing.T) {
	prod := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-1", Labels: map[string]string{"env": "prod", "region": "eu"}}}
	dev := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "dev-1", Labels: map[string]string{"env": "dev"}}}
	eu := fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: "eu"}, Spec: fleet.ClusterGroupSpec{Selector: sel("region", "eu")}}
	everything := []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	for _, tc := range []struct {
		name         string
		restrictions []fleet.BundleTargetRestriction
		c            *fleet.Cluster
		want         bool
	}{
		{"no restrictions", nil, dev, true},
		{"restricted by labels, inside", []fleet.BundleTargetRestriction{{ClusterSelector: sel("env", "prod")}}, prod, true},
		{"restricted by labels, outside", []fleet.BundleTargetRestriction{{ClusterSelector: sel("env", "prod")}}, dev, false},
		{"restricted by name", []fleet.BundleTargetRestriction{{ClusterName: "dev-1"}}, dev, true},
		{"restricted by group, outside", []fleet.BundleTargetRestriction{{ClusterGroup: "eu"}}, dev, false},
		{"restricted by group, inside", []fleet.BundleTargetRestriction{{ClusterGroup: "eu"}}, prod, true},
		{"second restriction allows", []fleet.BundleTargetRestriction{{ClusterName: "x"}, {ClusterSelector: sel("env", "dev")}}, dev, true},
		{"a restriction without criteria allows nothing", []fleet.BundleTargetRestriction{{Name: "empty"}}, prod, false},
	} {
		b := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: everything, TargetRestrictions: tc.restrictions}}
		got, err := Match(b, tc.c, Groups{Items: []fleet.ClusterGroup{eu}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (got != nil) != tc.want {
			t.Errorf("%s: selected=%v, want %v", tc.name, got != nil, tc.want)
		}
		if !tc.want {
			if d := Describe(b, tc.c, got); !strings.Contains(d, "targetRestrictions") {
				t.Errorf("%s: Describe %q should name the restrictions", tc.name, d)
			}
		}
	}

	// A restriction with an invalid selector, or one needing groups not
	// given, is an error that names the restriction.
	bad := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: everything, TargetRestrictions: []fleet.BundleTargetRestriction{{ClusterSelector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Like"}}}}}}}
	if _, err := Match(bad, prod, Groups{}); err == nil || !strings.Contains(err.Error(), "spec.targetRestrictions[0].clusterSelector") {
		t.Errorf("invalid restriction selector: %v", err)
	}
	needsGroup := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: everything, TargetRestrictions: []fleet.BundleTargetRestriction{{ClusterGroup: "eu"}}}}
	_, err := Match(needsGroup, prod, Groups{Given: true})
	var missing *MissingGroupsError
	if !errors.As(err, &missing) || !missing.Restriction || !strings.Contains(err.Error(), "spec.targetRestrictions[0] needs ClusterGroup eu") {
		t.Errorf("restriction needing a group not given: %v", err)
	}
}
