package bundle

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/bundlerollout"
)

// While a pass writes the BundleDeployments of many clusters, the Bundle's
// status says so: the new generation observed, every targeted cluster as it
// is, except those whose deployment the pass changes and has not written
// yet: Pending. Ready is False saying how far the writing is.
func TestSetProgress_CountsTheClustersAsTheyAreAndTheChangingOnesPending(t *testing.T) {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "app", Generation: 7}}
	b.Status.ObservedGeneration = 6
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: fleet.ReadyCondition, Status: metav1.ConditionTrue, Reason: fleet.SucceededReason})
	applied := func(ns, id string) fleet.BundleDeployment {
		bd := fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
		bd.Spec.DeploymentID = id
		bd.Status.AppliedDeploymentID, bd.Status.Ready, bd.Status.NonModified = "old", true, true
		return bd
	}
	seen := []fleet.BundleDeployment{
		applied("c1", "new"), // changed and written: waits for its agent
		applied("c2", "new"),
		applied("c3", "old"), // not changed by this pass: Ready as it is
	}
	// 5 clusters change, 2 are written; 2 more wait for their namespace.
	setProgress(b, seen, 2, 5, 10, 2, time.Now())

	s := b.Status.Summary
	if s.DesiredReady != 10 || s.Ready != 1 || s.WaitApplied != 2 || s.Pending != 3+2 {
		t.Errorf("summary %+v; want 10 desired, 1 Ready, 2 WaitApplied, 5 Pending (3 changing not written yet, 2 waiting for their namespace)", s)
	}
	if b.Status.ObservedGeneration != 7 {
		t.Errorf("observedGeneration %d: the change is not shown", b.Status.ObservedGeneration)
	}
	if b.Status.Display.ReadyClusters != "1/10" {
		t.Errorf("readyClusters %q", b.Status.Display.ReadyClusters)
	}
	ready := meta.FindStatusCondition(b.Status.Conditions, fleet.ReadyCondition)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != fleet.BundleDeploymentsNotReadyReason ||
		!strings.Contains(ready.Message, "generation 7: 2 of 5 clusters changed, 1 of 10 Ready") {
		t.Errorf("Ready %+v", ready)
	}
	if r := meta.FindStatusCondition(b.Status.Conditions, fleet.ReconcilingCondition); r == nil || r.Status != metav1.ConditionTrue {
		t.Errorf("Reconciling %+v: the Bundle is being worked on", r)
	}
}

// Only a write that changes a cluster's deployment counts as one of the
// pass's changes: a partitioned rollout's pass writes every cluster, and
// those it keeps as they are stay counted as they are, not Pending.
func TestProgress_OnlyChangedDeploymentsArePending(t *testing.T) {
	bd := func(dep, staged string) *fleet.BundleDeployment {
		return &fleet.BundleDeployment{Spec: fleet.BundleDeploymentSpec{DeploymentID: dep, StagedDeploymentID: staged}}
	}
	for _, tc := range []struct {
		name string
		p    placement
		want bool
	}{
		{"new BundleDeployment", placement{step: bundlerollout.Deploy}, true},
		{"deploy a new ID", placement{step: bundlerollout.Deploy, bd: bd("a", "a")}, true},
		{"deploy the same ID", placement{step: bundlerollout.Deploy, bd: bd("b", "b")}, false},
		{"stage a new ID", placement{step: bundlerollout.Stage, bd: bd("a", "a")}, true},
		{"stage the staged ID", placement{step: bundlerollout.Stage, bd: bd("a", "b")}, false},
		{"keep", placement{step: bundlerollout.Keep, bd: bd("a", "a")}, false},
	} {
		if got := changes(&tc.p, "b"); got != tc.want {
			t.Errorf("%s: changes %v, want %v", tc.name, got, tc.want)
		}
	}

	pr := &progress{seen: map[string]fleet.BundleDeployment{}, changing: map[string]bool{"c1": true}}
	written := func(ns string) *fleet.BundleDeployment {
		return &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	}
	pr.add(written("c1"))
	pr.add(written("c1")) // a retried write is one cluster
	pr.add(written("c2")) // written, not changed
	if pr.done != 1 || len(pr.seen) != 2 {
		t.Errorf("done %d, seen %d; want 1 changed cluster written, 2 seen", pr.done, len(pr.seen))
	}
}
