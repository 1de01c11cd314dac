package rollout

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// TestConditions: each state a rollout reaches through Progress gives the
// kstatus conditions every fleet kind uses, a message that says what to do,
// and a result that never hands a final state back to controller-runtime
// for retry.
func TestConditions(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	staged := &fleet.AgentRolloutStrategy{Canary: &fleet.AgentRolloutCanary{Count: 1}, ProgressDeadline: &metav1.Duration{Duration: 5 * time.Minute}, AutoRollback: true}
	noRollback := staged.DeepCopy()
	noRollback.AutoRollback = false
	for _, tc := range []struct {
		name    string
		ro      func() *fleet.AgentRollout
		in      Inputs
		ready   metav1.ConditionStatus
		reason  string
		stalled bool
		// reconciling: the Reconciling condition is True.
		reconciling bool
		// requeue is the RequeueAfter of the result.
		requeue time.Duration
		// says is in the Ready condition's message.
		says []string
	}{
		{
			name: "a wave in progress waits until its deadline",
			ro:   func() *fleet.AgentRollout { return rolloutOf(staged, t0) },
			in:   Inputs{Observed: obs(), Now: t0.Add(time.Minute)},
			// Waiting for the canary.
			ready: metav1.ConditionFalse, reason: fleet.ProgressingReason, reconciling: true, requeue: 4 * time.Minute,
			says: []string{"wave 1/3", "ws/a", "deadline in 4m0s"},
		},
		{
			name:  "every wave updated: Ready",
			ro:    func() *fleet.AgentRollout { return rolloutOf(staged, t0) },
			in:    Inputs{Observed: obs("ws/a", "ws/b", "ws/c", "ws/d", "ws/e"), Now: t0.Add(time.Minute)},
			ready: metav1.ConditionTrue, reason: fleet.SucceededReason,
			says: []string{"every planned cluster runs revision abc"},
		},
		{
			name: "paused: Reconciling, and the message names the resume command",
			ro: func() *fleet.AgentRollout {
				ro := rolloutOf(staged, t0)
				ro.Spec.Paused = true
				return ro
			},
			in:    Inputs{Observed: obs(), Now: t0.Add(time.Minute)},
			ready: metav1.ConditionFalse, reason: fleet.PausedReason, reconciling: true,
			says: []string{"paused", "fleet rollout resume"},
		},
		{
			name:  "halted without rollback: Stalled, not requeued, says resume or abort",
			ro:    func() *fleet.AgentRollout { return rolloutOf(noRollback, t0) },
			in:    Inputs{Observed: obs(), Now: t0.Add(6 * time.Minute)},
			ready: metav1.ConditionFalse, reason: HaltedReason, stalled: true,
			says: []string{"halted at wave 1/3", "ws/a", "fleet rollout resume", "fleet rollout abort"},
		},
		{
			name:  "halted and rolled back: Stalled, says resume or abort too",
			ro:    func() *fleet.AgentRollout { return rolloutOf(staged, t0) },
			in:    Inputs{Observed: obs(), CanRollBack: true, Now: t0.Add(6 * time.Minute)},
			ready: metav1.ConditionFalse, reason: HaltedReason, stalled: true,
			says: []string{"went back to revision old", "fleet rollout resume", "fleet rollout abort"},
		},
		{
			name: "aborted: Stalled, says how a new rollout starts",
			ro: func() *fleet.AgentRollout {
				ro := rolloutOf(staged, t0)
				ro.Spec.Aborted = true
				return ro
			},
			in:    Inputs{Observed: obs(), CanRollBack: true, Now: t0.Add(time.Minute)},
			ready: metav1.ConditionFalse, reason: AbortedReason, stalled: true,
			says: []string{"aborted at wave", "a new revision"},
		},
		{
			name: "superseded: Stalled, points at the current rollout",
			ro: func() *fleet.AgentRollout {
				ro := rolloutOf(staged, t0)
				ro.Status.Phase = fleet.RolloutSuperseded
				ro.Status.Message = "replaced by revision def (AgentRollout agent-def) before it completed"
				return ro
			},
			in:    Inputs{Observed: obs(), Now: t0.Add(time.Minute)},
			ready: metav1.ConditionFalse, reason: fleet.SupersededReason, stalled: true,
			says: []string{"agent-def", "fleet rollout status"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro := tc.ro()
			st, _, after := Progress(ro, tc.in)
			ro.Status = st
			out := Outcome(ro, after)
			statusRules.Set(ro, out, tc.in.Now)

			ready := meta.FindStatusCondition(ro.Status.Conditions, fleet.ReadyCondition)
			if ready == nil || ready.Status != tc.ready || ready.Reason != tc.reason {
				t.Fatalf("Ready condition %+v, want %s/%s", ready, tc.ready, tc.reason)
			}
			if ready.ObservedGeneration != ro.Generation {
				t.Errorf("Ready.observedGeneration %d, want %d", ready.ObservedGeneration, ro.Generation)
			}
			for _, s := range tc.says {
				if !strings.Contains(ready.Message, s) {
					t.Errorf("Ready message %q does not say %q", ready.Message, s)
				}
			}
			if got := meta.IsStatusConditionTrue(ro.Status.Conditions, fleet.StalledCondition); got != tc.stalled {
				t.Errorf("Stalled=%v, want %v (%+v)", got, tc.stalled, ro.Status.Conditions)
			}
			if got := meta.IsStatusConditionTrue(ro.Status.Conditions, fleet.ReconcilingCondition); got != tc.reconciling {
				t.Errorf("Reconciling=%v, want %v (%+v)", got, tc.reconciling, ro.Status.Conditions)
			}
			res, err := out.Result(0)
			if err != nil {
				t.Fatalf("the result hands controller-runtime an error to retry: %v", err)
			}
			if res.RequeueAfter != tc.requeue {
				t.Errorf("RequeueAfter %s, want %s", res.RequeueAfter, tc.requeue)
			}
		})
	}
}

// TestNewlyStalled: the Warning event of a stall is recorded once, when
// the rollout becomes stalled for that reason, not on every pass after.
func TestNewlyStalled(t *testing.T) {
	ro := rolloutOf(nil, time.Now())
	ro.Status.Phase = fleet.RolloutSuperseded
	out := Outcome(ro, 0)
	if newlyStalled("", out) == nil {
		t.Fatal("a rollout that just stalled gives no event")
	}
	statusRules.Set(ro, out, time.Now())
	if s := newlyStalled(stalledReason(ro), out); s != nil {
		t.Fatalf("a rollout stalled for the same reason gives another event: %v", s)
	}
	if newlyStalled(stalledReason(ro), Outcome(rolloutOf(nil, time.Now()), 0)) != nil {
		t.Fatal("a rollout that is not stalled gives a stall event")
	}
}
