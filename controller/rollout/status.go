package rollout

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// Reasons of an AgentRollout's conditions besides the shared ones
// (Succeeded, Progressing, Paused, Superseded).
const (
	// InvalidStrategyReason: the rollout's strategy cannot be planned.
	InvalidStrategyReason = "InvalidStrategy"
	// RevisionMismatchReason: the AgentRollout named after the current
	// revision holds another one in spec.revision (edited by hand).
	RevisionMismatchReason = "RevisionMismatch"
	// HaltedReason: a wave missed its deadline.
	HaltedReason = "RolloutHalted"
	// AbortedReason: `fleet rollout abort` ended the rollout.
	AbortedReason = "RolloutAborted"
)

// statusRules are the AgentRollout's kstatus rules: Ready says whether every
// planned Cluster runs the revision. A wave in progress, or a pause, is
// Reconciling (the controller or a person moves it on); a halted, aborted or
// superseded rollout is Stalled: nothing moves it on its own.
var statusRules = reconciler.Conditions{Ready: fleet.ReadyCondition, Failing: "rolling the agents out failed"}

// Outcome is what a rollout's status comes to, for its conditions: after is
// when its wave's deadline falls (zero: none). A pure function of the status
// Progress computed.
func Outcome(ro *fleet.AgentRollout, after time.Duration) reconciler.Outcome {
	st := ro.Status
	switch st.Phase {
	case fleet.RolloutComplete:
		return reconciler.Success(fleet.SucceededReason, "%s", st.Message)
	case fleet.RolloutPaused:
		return reconciler.Failure(reconciler.Wait(fleet.PausedReason, 0, "%s", st.Message))
	case fleet.RolloutHalted:
		msg := st.Message
		if ro.Spec.Strategy != nil && ro.Spec.Strategy.AutoRollback {
			// Progress's message says what happened; say what to do too.
			msg += "; `fleet rollout resume` retries the wave once they are fixed, `fleet rollout abort` puts every updated cluster back"
		}
		return reconciler.Failure(reconciler.Stall(HaltedReason, "%s", msg))
	case fleet.RolloutAborted:
		return reconciler.Failure(reconciler.Stall(AbortedReason, "%s; a new revision (a change of the agent configuration, or an upgrade) starts a new rollout", st.Message))
	case fleet.RolloutSuperseded:
		return reconciler.Failure(reconciler.Stall(fleet.SupersededReason, "%s; nothing to do here: follow the current AgentRollout (`fleet rollout status`)", st.Message))
	case "":
		return reconciler.Failure(reconciler.Wait(fleet.ProgressingReason, 0, "not planned yet"))
	default:
		msg := st.Message
		if msg == "" {
			msg = fmt.Sprintf("wave %s", st.Display.Wave)
		}
		return reconciler.Failure(reconciler.Wait(fleet.ProgressingReason, after, "%s", msg))
	}
}

// newlyStalled returns the stall of out when the rollout was not stalled
// for that same reason before (before: the reason of its Stalled condition,
// "" for none): the one time a Warning event says so.
func newlyStalled(before string, out reconciler.Outcome) *reconciler.Stalled {
	if s := out.Stalled(); s != nil && s.Reason != before {
		return s
	}
	return nil
}

// stalledReason is the reason of ro's Stalled condition, "" when it is not
// stalled.
func stalledReason(ro *fleet.AgentRollout) string {
	if c := meta.FindStatusCondition(ro.Status.Conditions, fleet.StalledCondition); c != nil && c.Status == metav1.ConditionTrue {
		return c.Reason
	}
	return ""
}
