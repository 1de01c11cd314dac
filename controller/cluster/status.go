package cluster

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/summary"
)

// outcome is what one reconcile observed; computeConditions turns it into
// conditions. Keeping it a plain value keeps the status a pure function that
// is table-tested without an API server.
type outcome struct {
	// imported: nil for agent-initiated clusters; otherwise the import
	// step's result.
	imported *stepResult
	// failure is an error of a step other than import (namespace, bundle).
	failure *stepResult
	// offlineAfter is how long without a heartbeat makes the agent offline.
	offlineAfter time.Duration
	now          time.Time
	// bundles summarises the cluster's BundleDeployments.
	bundles fleet.BundleSummary
}

// stepResult is one step's condition: ok, or a reason and message, and
// whether retrying can help (stalled: it cannot, the user must act).
type stepResult struct {
	ok      bool
	reason  string
	message string
	stalled bool
}

func okResult(message string) *stepResult {
	return &stepResult{ok: true, reason: fleet.SucceededReason, message: message}
}

func waiting(reason, format string, args ...any) *stepResult {
	return &stepResult{reason: reason, message: fmt.Sprintf(format, args...)}
}

func stalled(reason, format string, args ...any) *stepResult {
	return &stepResult{reason: reason, message: fmt.Sprintf(format, args...), stalled: true}
}

// computeConditions sets Ready, Reconciling, Stalled and Imported.
func computeConditions(c *fleet.Cluster, o outcome) {
	gen := c.Generation
	set := func(t string, status bool, reason, msg string) {
		s := metav1.ConditionFalse
		if status {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	if o.imported != nil {
		set(fleet.ImportedCondition, o.imported.ok, o.imported.reason, o.imported.message)
	} else {
		meta.RemoveStatusCondition(&c.Status.Conditions, fleet.ImportedCondition)
	}

	// The first failing step decides; otherwise the agent's presence does.
	blocking := o.failure
	if blocking == nil && o.imported != nil && !o.imported.ok {
		blocking = o.imported
	}
	switch {
	case blocking != nil && blocking.stalled:
		set(fleet.ReadyCondition, false, blocking.reason, blocking.message)
		set(fleet.StalledCondition, true, blocking.reason, blocking.message)
		meta.RemoveStatusCondition(&c.Status.Conditions, fleet.ReconcilingCondition)
	case blocking != nil:
		set(fleet.ReadyCondition, false, blocking.reason, blocking.message)
		set(fleet.ReconcilingCondition, true, blocking.reason, blocking.message)
		meta.RemoveStatusCondition(&c.Status.Conditions, fleet.StalledCondition)
	default:
		meta.RemoveStatusCondition(&c.Status.Conditions, fleet.StalledCondition)
		ready, reason, msg := agentState(c, o)
		if ready && summary.WorstState(o.bundles) != "" {
			ready, reason, msg = false, fleet.BundleDeploymentsNotReadyReason, summary.ReadyMessage(o.bundles)
		}
		set(fleet.ReadyCondition, ready, reason, msg)
		if ready {
			meta.RemoveStatusCondition(&c.Status.Conditions, fleet.ReconcilingCondition)
		} else {
			set(fleet.ReconcilingCondition, true, reason, msg)
		}
	}
	c.Status.Display.State = displayState(c, o)
}

// agentState reports whether the agent checks in.
func agentState(c *fleet.Cluster, o outcome) (bool, string, string) {
	last := c.Status.Agent.LastSeen
	if last.IsZero() {
		if c.Spec.KubeConfigSecret != "" {
			return false, fleet.WaitingForRegistrationReason, "agent deployed; waiting for it to register and check in"
		}
		return false, fleet.WaitingForRegistrationReason, "waiting for an agent to register for this cluster (helm install fleet-agent with a ClusterRegistrationToken's values)"
	}
	if o.offlineAfter > 0 && o.now.Sub(last.Time) > o.offlineAfter {
		return false, fleet.OfflineReason, fmt.Sprintf("agent offline: last check-in %s ago (%s), expected every %s",
			o.now.Sub(last.Time).Round(time.Second), last.UTC().Format(time.RFC3339), heartbeatInterval(c))
	}
	return true, fleet.AgentHeartbeatReason, ""
}

func heartbeatInterval(c *fleet.Cluster) time.Duration {
	return time.Duration(c.Status.Agent.HeartbeatIntervalSeconds) * time.Second
}

func displayState(c *fleet.Cluster, o outcome) string {
	if c.Status.Agent.LastSeen.IsZero() {
		return "WaitCheckIn"
	}
	if ready, reason, _ := agentState(c, o); !ready && reason == fleet.OfflineReason {
		return "Offline"
	}
	return string(summary.WorstState(o.bundles))
}

func statusEqual(a, b fleet.ClusterStatus) bool { return equality.Semantic.DeepEqual(a, b) }

// requeueForHeartbeat schedules the next look at a Cluster whose agent is
// online for the moment it would count as offline: a heartbeat in time
// moves that moment on (the heartbeat itself triggers a reconcile); a
// missing one turns the Cluster Offline exactly then, without polling.
func requeueForHeartbeat(res ctrl.Result, c *fleet.Cluster, o outcome) ctrl.Result {
	last := c.Status.Agent.LastSeen
	if last.IsZero() || o.offlineAfter <= 0 {
		return res
	}
	until := last.Add(o.offlineAfter).Sub(o.now)
	if until <= 0 {
		return res // already offline: the next heartbeat brings it back
	}
	until += time.Second
	if res.RequeueAfter == 0 || until < res.RequeueAfter {
		res.RequeueAfter = until
	}
	return res
}
