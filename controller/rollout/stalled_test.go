package rollout_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/rollout"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/renderer"
)

// TestStalledRollout_NotRetried edits the current AgentRollout's
// spec.revision by hand, which the controller cannot act on: the rollout
// says so (Stalled, reason RevisionMismatch, a message that says to delete
// it) with one Warning event, and the controller does not retry it: no
// reconcile error, no status write, no second event, even when a change of
// the object brings it back. Deleting it, as the message says, mends it.
func TestStalledRollout_NotRetried(t *testing.T) {
	// The rollout of the revision the controller renders agents at now.
	setConfig(t, baseConfig())
	agentRenderer, err := renderer.NewAgentRenderer()
	if err != nil {
		t.Fatal(err)
	}
	revision, err := rollout.Revision(agentRenderer, fc.Config.Get())
	if err != nil {
		t.Fatal(err)
	}
	name := rollout.Name(revision)
	current := &fleet.AgentRollout{}
	testenv.Eventually(t, 60*time.Second, "the current AgentRollout "+name, func() error {
		if err := up.Get(t.Context(), client.ObjectKey{Name: name}, current); err != nil {
			return err
		}
		if !current.Status.Current || meta.FindStatusCondition(current.Status.Conditions, fleet.ReadyCondition) == nil {
			return fmt.Errorf("current %v, conditions %+v", current.Status.Current, current.Status.Conditions)
		}
		return nil
	})
	t.Cleanup(func() {
		// Whatever happened, the current revision's rollout as the
		// controller makes it, for the tests after this one.
		ctx := t.Context()
		ro := &fleet.AgentRollout{}
		if err := up.Get(ctx, client.ObjectKey{Name: name}, ro); err == nil && ro.Spec.Revision != revision {
			_ = up.Delete(ctx, ro)
		}
	})

	// Events of an earlier run (go test -count) stay: count the new ones.
	earlier := warnings(t, name, rollout.RevisionMismatchReason)
	if err := up.Patch(t.Context(), current, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"revision":"0123456789abcdef"}}`))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the rollout Stalled with reason RevisionMismatch and one Warning event", func() error {
		ro := getRollout(t, name)
		s := meta.FindStatusCondition(ro.Status.Conditions, fleet.StalledCondition)
		if s == nil || s.Status != "True" || s.Reason != rollout.RevisionMismatchReason {
			return fmt.Errorf("Stalled condition %+v", s)
		}
		ready := meta.FindStatusCondition(ro.Status.Conditions, fleet.ReadyCondition)
		if ready == nil || ready.Status != "False" || !strings.Contains(ready.Message, "delete it") || !strings.Contains(ready.Message, "0123456789ab") {
			return fmt.Errorf("Ready condition %+v: want False, naming the revision and saying to delete it", ready)
		}
		if meta.FindStatusCondition(ro.Status.Conditions, fleet.ReconcilingCondition) != nil {
			return fmt.Errorf("a stalled rollout says it is Reconciling")
		}
		if n := warnings(t, name, rollout.RevisionMismatchReason) - earlier; n != 1 {
			return fmt.Errorf("%d RevisionMismatch events", n)
		}
		return nil
	})

	errs := reconciles(t, "error")
	passes := reconciles(t, "")
	// A change of the object brings it back: the pass finds it stalled
	// again and leaves it so.
	if err := up.Patch(t.Context(), &fleet.AgentRollout{ObjectMeta: current.ObjectMeta}, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "a pass after the change", func() error {
		if n := reconciles(t, ""); n <= passes {
			return fmt.Errorf("%v passes", n)
		}
		return nil
	})
	rv := getRollout(t, name).ResourceVersion
	testenv.Consistently(t, 5*time.Second, "the stalled rollout is not retried", func() error {
		if n := reconciles(t, "error"); n != errs {
			return fmt.Errorf("the agentrollout controller returned %v errors to controller-runtime since the stall (retried with backoff)", n-errs)
		}
		if got := getRollout(t, name).ResourceVersion; got != rv {
			return fmt.Errorf("the stalled rollout was written again (resourceVersion %s → %s)", rv, got)
		}
		if n := warnings(t, name, rollout.RevisionMismatchReason) - earlier; n != 1 {
			return fmt.Errorf("%d RevisionMismatch events, want the first one only", n)
		}
		return nil
	})

	// What the message says to do.
	if err := up.Delete(t.Context(), &fleet.AgentRollout{ObjectMeta: current.ObjectMeta}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the rollout made again for the current revision, not stalled", func() error {
		ro := &fleet.AgentRollout{}
		if err := up.Get(t.Context(), client.ObjectKey{Name: name}, ro); err != nil {
			return err
		}
		if ro.Spec.Revision != revision {
			return fmt.Errorf("spec.revision %s", ro.Spec.Revision)
		}
		if meta.FindStatusCondition(ro.Status.Conditions, fleet.ReadyCondition) == nil || meta.IsStatusConditionTrue(ro.Status.Conditions, fleet.StalledCondition) {
			return fmt.Errorf("conditions %+v", ro.Status.Conditions)
		}
		return nil
	})
}

func getRollout(t *testing.T, name string) *fleet.AgentRollout {
	t.Helper()
	ro := &fleet.AgentRollout{}
	if err := up.Get(t.Context(), client.ObjectKey{Name: name}, ro); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return ro
}

// warnings counts the Warning events of an AgentRollout with a reason
// (cluster-scoped objects' events are in namespace default).
func warnings(t *testing.T, name, reason string) int {
	t.Helper()
	list := &corev1.EventList{}
	if err := up.List(t.Context(), list, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning && e.Reason == reason && e.InvolvedObject.Name == name {
			n += max(1, int(e.Count))
		}
	}
	return n
}

// reconciles is how many passes of the agentrollout controller ended with
// result ("error", "success", "requeue", "requeue_after"; "" for any), from
// controller-runtime's own metrics.
func reconciles(t *testing.T, result string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["controller"] == "agentrollout" && (result == "" || labels["result"] == result) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}
