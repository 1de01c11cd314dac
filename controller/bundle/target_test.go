package bundle

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

func TestMatchTarget(t *testing.T) {
	prod := fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-1", Labels: map[string]string{"env": "prod", "region": "eu"}}}
	dev := fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "dev-1", Labels: map[string]string{"env": "dev"}}}
	groups := []fleet.ClusterGroup{
		{ObjectMeta: metav1.ObjectMeta{Name: "eu", Labels: map[string]string{"tier": "gold"}}, Spec: fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "none"}},
	}
	sel := func(kv ...string) *metav1.LabelSelector {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return &metav1.LabelSelector{MatchLabels: m}
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
		{"by group labels", fleet.BundleTarget{ClusterGroupSelector: sel("tier", "gold")}, prod, true},
		{"name and labels both needed", fleet.BundleTarget{ClusterName: "prod-1", ClusterSelector: sel("env", "dev")}, prod, false},
		{"no criteria selects nothing", fleet.BundleTarget{Name: "empty"}, prod, false},
	}
	for _, tc := range cases {
		b := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: []fleet.BundleTarget{tc.target}}}
		got, err := matchTarget(b, &tc.c, groups)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (got != nil) != tc.want {
			t.Errorf("%s: matched=%v, want %v", tc.name, got != nil, tc.want)
		}
	}
	bad := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Like"}}}}}}}
	if _, err := matchTarget(bad, &prod, nil); err == nil {
		t.Error("an invalid selector must be an error naming the target")
	}
}
