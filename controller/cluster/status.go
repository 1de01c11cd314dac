package cluster

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/rollout"
	"github.com/gitops-fleet/fleet/controller/summary"
	"github.com/gitops-fleet/fleet/internal/certhost"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// statusRules are the Cluster's kstatus rules: Ready says whether its agent
// checks in and its Bundles are ready, once every phase of the pass
// succeeded.
var statusRules = reconciler.Conditions{Ready: fleet.ReadyCondition, Failing: "reconciling the cluster failed"}

// OwnedConditions are the conditions the Cluster reconciler writes; it
// keeps every other (Connected, written by fleet-proxy) as it reads it.
var OwnedConditions = append(statusRules.Owned(), fleet.ImportedCondition, fleet.AgentRolloutCondition, fleet.DirectEndpointCondition)

// RolledBackReason (AgentRollout condition): a staged rollout put the
// agent back on the previous revision.
const RolledBackReason = "RolledBack"

// observation is what one pass found and how it ended; computeConditions
// turns it into the status. Keeping it a plain value keeps the status a pure
// function that is table-tested without an API server.
type observation struct {
	now time.Time
	// offlineAfter is how long without a heartbeat makes the agent offline.
	offlineAfter time.Duration
	// bundles summarises the cluster's BundleDeployments.
	bundles fleet.BundleSummary
	// imported: the import phase ran (a manager-initiated cluster whose
	// earlier phases succeeded); then err is the import's.
	imported bool
	// rollout is what the agent-bundle phase rendered the agent from (zero
	// when the phase did not run).
	rollout rollout.Source
	// err is the error of the phase that ended the pass, nil when every
	// phase succeeded.
	err error
}

// computeConditions sets Ready, Reconciling and Stalled (statusRules),
// Imported and the display state, and returns the pass's outcome. A phase
// that failed decides Ready; otherwise the agent's presence and its Bundles
// do. Imported says how the last import went: what Ready says when the
// import failed.
func computeConditions(c *fleet.Cluster, o observation) reconciler.Outcome {
	out := readiness(c, o)
	statusRules.Set(c, out, o.now)
	switch {
	case c.Spec.KubeConfigSecret == "":
		meta.RemoveStatusCondition(&c.Status.Conditions, fleet.ImportedCondition)
	case !o.imported || out.Kind() == reconciler.KindRaced:
		// The import did not run (an earlier phase failed) or raced: what
		// Imported said still holds.
	case o.err == nil:
		setImported(c, metav1.ConditionTrue, fleet.SucceededReason, fmt.Sprintf("agent deployed at generation %d", c.Spec.RedeployAgentGeneration), o.now)
	default:
		ready := meta.FindStatusCondition(c.Status.Conditions, fleet.ReadyCondition)
		setImported(c, metav1.ConditionFalse, ready.Reason, ready.Message, o.now)
	}
	setAgentRollout(c, o)
	setDirectEndpoint(c, o.now)
	c.Status.Display.State = displayState(c, o)
	return out
}

// setAgentRollout says when a staged rollout holds the agent back or put it
// back.
func setAgentRollout(c *fleet.Cluster, o observation) {
	set := func(reason, msg string) {
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: fleet.AgentRolloutCondition, Status: metav1.ConditionFalse,
			Reason: reason, Message: msg, ObservedGeneration: c.Generation, LastTransitionTime: metav1.NewTime(o.now)})
	}
	switch src := o.rollout; {
	case src.Hold:
		set(rollout.WaitingForWaveReason, src.Message)
	case src.Renderer != nil:
		set(RolledBackReason, fmt.Sprintf("a staged agent rollout put this agent back on revision %.12s", src.Revision))
	case src.Revision != "":
		meta.RemoveStatusCondition(&c.Status.Conditions, fleet.AgentRolloutCondition)
	}
}

// setDirectEndpoint says when the direct endpoint's serving certificate, as
// the agent reported its names, does not cover the host of the url users
// dial (kubectl then fails TLS). A Cluster without a direct endpoint, in
// mode webhook (users dial the API server) or whose agent reported no names
// has no such condition.
func setDirectEndpoint(c *fleet.Cluster, now time.Time) {
	if msg := directCertificateMismatch(c); msg != "" {
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: fleet.DirectEndpointCondition, Status: metav1.ConditionFalse,
			Reason: fleet.DirectCertificateHostMismatchReason, Message: msg, ObservedGeneration: c.Generation, LastTransitionTime: metav1.NewTime(now)})
		return
	}
	meta.RemoveStatusCondition(&c.Status.Conditions, fleet.DirectEndpointCondition)
}

// directCertificateMismatch is what is wrong with the direct endpoint's
// certificate for the url's host, "" when nothing is (or nothing is known).
func directCertificateMismatch(c *fleet.Cluster) string {
	d := c.Spec.AgentDirectEndpoint
	names := c.Status.Agent.DirectEndpointCertificateNames
	if d == nil || d.URL == "" || d.Mode == "webhook" || len(names) == 0 {
		return ""
	}
	var m *certhost.Mismatch
	if err := certhost.Check(names, d.URL); !errors.As(err, &m) {
		return ""
	}
	return fmt.Sprintf("the direct endpoint's serving certificate (Secret fleet-agent-direct-tls in the agent's namespace) does not cover host %q of spec.agentDirectEndpoint.url: %v; kubectl's direct context fails with an x509 error. "+
		"Make the certificate again with %q among its subject alternative names (or delete that Secret, and the agent makes one that covers it), or set url to one of its names",
		m.Host, m, m.Host)
}

// readiness is the outcome Ready is set from.
func readiness(c *fleet.Cluster, o observation) reconciler.Outcome {
	if o.err != nil {
		return reconciler.Failure(o.err)
	}
	ready, reason, msg := agentState(c, o)
	if ready && summary.WorstState(o.bundles) != "" {
		ready, reason, msg = false, fleet.BundleDeploymentsNotReadyReason, summary.ReadyMessage(o.bundles)
	}
	if ready {
		return reconciler.Success(reason, "%s", msg)
	}
	// Waiting on the agent or its Bundles: a heartbeat, a BundleDeployment's
	// change or the heartbeat schedule brings the Cluster back.
	return reconciler.Failure(reconciler.Wait(reason, 0, "%s", msg))
}

func setImported(c *fleet.Cluster, status metav1.ConditionStatus, reason, msg string, now time.Time) {
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: fleet.ImportedCondition, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: c.Generation, LastTransitionTime: metav1.NewTime(now),
	})
}

// agentState reports whether the agent checks in.
func agentState(c *fleet.Cluster, o observation) (bool, string, string) {
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

func displayState(c *fleet.Cluster, o observation) string {
	if c.Status.Agent.LastSeen.IsZero() {
		return "WaitCheckIn"
	}
	if ready, reason, _ := agentState(c, o); !ready && reason == fleet.OfflineReason {
		return "Offline"
	}
	return string(summary.WorstState(o.bundles))
}

// heartbeatSchedule is when to look again at a Cluster whose agent is
// online: the moment it would count as offline. A heartbeat in time moves
// that moment on (the heartbeat itself triggers a reconcile); a missing one
// turns the Cluster Offline exactly then, without polling. Zero: no agent
// online, nothing to schedule (the next heartbeat brings it back).
func heartbeatSchedule(c *fleet.Cluster, o observation) time.Duration {
	last := c.Status.Agent.LastSeen
	if last.IsZero() || o.offlineAfter <= 0 {
		return 0
	}
	until := last.Add(o.offlineAfter).Sub(o.now)
	if until <= 0 {
		return 0
	}
	return until + time.Second
}
