package bundle

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// While a pass writes the BundleDeployments of many clusters, the Bundle's
// status says so: the new generation observed, the clusters written so far
// as written (a changed one waits for its agent), every other one Pending,
// and Ready False saying how far the writing is.
func TestSetProgress_CountsWhatIsWrittenAndTheRestPending(t *testing.T) {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "app", Generation: 7}}
	b.Status.ObservedGeneration = 6
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: fleet.ReadyCondition, Status: metav1.ConditionTrue, Reason: fleet.SucceededReason})
	applied := func(ns, id string) fleet.BundleDeployment {
		bd := fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
		bd.Spec.DeploymentID = id
		bd.Status.AppliedDeploymentID, bd.Status.Ready, bd.Status.NonModified = "old", true, true
		return bd
	}
	written := []fleet.BundleDeployment{
		applied("c1", "new"), // changed: waits for its agent
		applied("c2", "new"),
		applied("c3", "old"), // unchanged by this generation: Ready
	}
	setProgress(b, written, 8, 10, 2, time.Now())

	s := b.Status.Summary
	if s.DesiredReady != 10 || s.Ready != 1 || s.WaitApplied != 2 || s.Pending != 7+2 {
		t.Errorf("summary %+v; want 10 desired, 1 Ready, 2 WaitApplied, 9 Pending (7 not written yet, 2 waiting for their namespace)", s)
	}
	if b.Status.ObservedGeneration != 7 {
		t.Errorf("observedGeneration %d: the change is not shown", b.Status.ObservedGeneration)
	}
	if b.Status.Display.ReadyClusters != "1/10" {
		t.Errorf("readyClusters %q", b.Status.Display.ReadyClusters)
	}
	ready := meta.FindStatusCondition(b.Status.Conditions, fleet.ReadyCondition)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != fleet.BundleDeploymentsNotReadyReason ||
		!strings.Contains(ready.Message, "generation 7: 3 of 8 clusters done, 1 Ready") {
		t.Errorf("Ready %+v", ready)
	}
	if r := meta.FindStatusCondition(b.Status.Conditions, fleet.ReconcilingCondition); r == nil || r.Status != metav1.ConditionTrue {
		t.Errorf("Reconciling %+v: the Bundle is being worked on", r)
	}
}
