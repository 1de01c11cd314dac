package summary

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

func bd(name, spec, applied string, ready, nonModified bool, mutate ...func(*fleet.BundleDeployment)) fleet.BundleDeployment {
	b := fleet.BundleDeployment{}
	b.Name, b.Namespace = name, "cluster-ns"
	b.Spec.DeploymentID, b.Spec.StagedDeploymentID = spec, spec
	b.Status.AppliedDeploymentID, b.Status.Ready, b.Status.NonModified = applied, ready, nonModified
	for _, m := range mutate {
		m(&b)
	}
	return b
}

func TestState(t *testing.T) {
	failed := func(b *fleet.BundleDeployment) {
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: fleet.DeployedCondition, Status: metav1.ConditionFalse, Reason: fleet.ApplyFailedReason, Message: "boom"})
	}
	staged := func(b *fleet.BundleDeployment) { b.Spec.StagedDeploymentID = "s-2:o" }
	deployed := func(reason string) func(*fleet.BundleDeployment) {
		return func(b *fleet.BundleDeployment) {
			meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: fleet.DeployedCondition, Status: metav1.ConditionFalse, Reason: reason, Message: "m"})
		}
	}
	cases := []struct {
		b    fleet.BundleDeployment
		want fleet.BundleState
	}{
		{bd("a", "s-1:o", "s-1:o", true, true), fleet.Ready},
		{bd("a", "s-2:o", "s-1:o", true, true), fleet.WaitApplied},
		{bd("a", "s-2:o", "s-1:o", true, true, failed), fleet.ErrApplied},
		{bd("a", "s-1:o", "s-1:o", false, true), fleet.NotReady},
		{bd("a", "s-1:o", "s-1:o", true, false), fleet.Modified},
		{bd("a", "s-1:o", "s-1:o", true, true, staged), fleet.OutOfSync},
		// Waiting for dependencies is waiting, not an error; a cycle is.
		{bd("a", "s-2:o", "s-1:o", true, true, deployed(fleet.WaitingForDependencyReason)), fleet.WaitApplied},
		{bd("a", "s-2:o", "s-1:o", true, true, deployed(fleet.DependencyCycleReason)), fleet.ErrApplied},
	}
	for i, tc := range cases {
		if got := State(&tc.b); got != tc.want {
			t.Errorf("case %d: %s, want %s", i, got, tc.want)
		}
	}
}

func TestSummarizeAndMessage(t *testing.T) {
	s := Summarize([]fleet.BundleDeployment{
		bd("a", "x", "x", true, true),
		bd("b", "x", "x", false, true),
		bd("c", "y", "x", true, true),
	})
	if s.DesiredReady != 3 || s.Ready != 1 || s.NotReady != 1 || s.WaitApplied != 1 || len(s.NonReadyResources) != 2 {
		t.Fatalf("%+v", s)
	}
	if w := WorstState(s); w != fleet.WaitApplied {
		t.Errorf("worst %s", w)
	}
	if m := ReadyMessage(s); m != "WaitApplied(1) [cluster-ns/c]; NotReady(1) [cluster-ns/b]" {
		t.Errorf("message %q", m)
	}
	if WorstState(Summarize(nil)) != "" {
		t.Error("empty summary not ready")
	}
}
