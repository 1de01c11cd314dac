package deployer

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Condition reasons of the deployer (defined with the API).
const (
	WaitingForContentReason = fleet.WaitingForContentReason
	ContentInvalidReason    = fleet.ContentInvalidReason
	HealthTimeoutReason     = fleet.HealthTimeoutReason
	MonitorFailedReason     = fleet.MonitorFailedReason
	DriftCorrectedReason    = fleet.DriftCorrectedReason
)

// maxListed bounds nonReadyStatus and modifiedStatus.
const maxListed = 10

// failure is why the deploy step failed.
type failure struct {
	Reason  string
	Message string
}

// observation is what one reconcile saw and did; computeStatus turns it
// into the status, without an API server.
type observation struct {
	Generation          int64
	DeploymentID        string
	ForceSyncGeneration int64
	Paused              bool

	// Exactly one of Waiting and Failed is set when the deploy step did
	// not complete.
	Waiting string
	Failed  *failure
	// WaitingReason is why it waits: WaitingForContent (also when empty)
	// or WaitingForDependency.
	WaitingReason string

	// Applied is set when this pass applied DeploymentID.
	Applied bool
	// AppliedAt is when the deployment in force was applied, when this
	// pass knows it anew (it applied a new deployment or a forced sync, or
	// the status did not record it); nil keeps the reported one.
	AppliedAt *metav1.Time
	// Resources is the inventory after this pass; nil keeps the reported one.
	Resources []fleet.BundleDeploymentResource

	// Monitored is set when health and drift were checked this pass.
	Monitored    bool
	MonitorError string
	NonReady     []fleet.NonReadyStatus
	Modified     []fleet.ModifiedStatus
	// Corrected names the objects whose drift this pass reverted.
	Corrected      []string
	HealthTimedOut bool
}

// computeStatus is the BundleDeployment status after a reconcile: old,
// updated with what o observed. Fields o has no news about are kept.
func computeStatus(old fleet.BundleDeploymentStatus, o observation) fleet.BundleDeploymentStatus {
	st := *old.DeepCopy()
	if o.Applied {
		st.AppliedDeploymentID = o.DeploymentID
		g := o.ForceSyncGeneration
		st.SyncGeneration = &g
	}
	if o.AppliedAt != nil {
		st.AppliedAt = o.AppliedAt
	}
	if o.Resources != nil {
		st.Resources = o.Resources
	}
	if o.Monitored {
		// A failed deploy step (atomic went back) is not ready, whatever
		// the objects in place.
		st.Ready = len(o.NonReady) == 0 && o.MonitorError == "" && o.Failed == nil
		st.NonModified = len(o.Modified) == 0
		st.NonReadyStatus = truncate(o.NonReady)
		st.ModifiedStatus = truncate(o.Modified)
		st.IncompleteState = len(o.NonReady) > maxListed || len(o.Modified) > maxListed
		st.ResourceCounts = resourceCounts(st.Resources, o.NonReady, o.Modified)
	}
	upToDate := st.AppliedDeploymentID == o.DeploymentID && o.DeploymentID != "" &&
		st.SyncGeneration != nil && *st.SyncGeneration == o.ForceSyncGeneration

	waitingReason := o.WaitingReason
	if waitingReason == "" {
		waitingReason = WaitingForContentReason
	}
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: shorten(msg), ObservedGeneration: o.Generation,
		})
	}

	// Deployed.
	switch {
	case o.Failed != nil:
		set(fleet.DeployedCondition, metav1.ConditionFalse, o.Failed.Reason, o.Failed.Message)
	case o.Waiting != "":
		set(fleet.DeployedCondition, metav1.ConditionFalse, waitingReason, o.Waiting)
	case o.Paused && !upToDate:
		set(fleet.DeployedCondition, metav1.ConditionFalse, fleet.PausedReason, "paused: deployment "+shortID(o.DeploymentID)+" is not applied until the BundleDeployment is unpaused")
	case upToDate:
		set(fleet.DeployedCondition, metav1.ConditionTrue, fleet.SucceededReason,
			fmt.Sprintf("applied deployment %s (%d resources)", shortID(o.DeploymentID), len(st.Resources)))
	default:
		set(fleet.DeployedCondition, metav1.ConditionFalse, fleet.ProgressingReason, "deployment "+shortID(o.DeploymentID)+" is not applied yet")
	}

	// Monitored.
	switch {
	case o.Monitored && o.MonitorError != "":
		set(fleet.MonitoredCondition, metav1.ConditionFalse, MonitorFailedReason, o.MonitorError)
	case o.Monitored && len(o.Corrected) > 0:
		set(fleet.MonitoredCondition, metav1.ConditionTrue, DriftCorrectedReason, "corrected drift of "+listNames(o.Corrected))
	case o.Monitored && len(o.Modified) > 0:
		set(fleet.MonitoredCondition, metav1.ConditionTrue, fleet.ModifiedReason, modifiedMessage(o.Modified))
	case o.Monitored:
		set(fleet.MonitoredCondition, metav1.ConditionTrue, fleet.SucceededReason, fmt.Sprintf("%d resources monitored, none modified", len(st.Resources)))
	default:
		set(fleet.MonitoredCondition, metav1.ConditionUnknown, fleet.WaitingReason, "nothing is monitored until the deployment is applied")
	}

	// State, Ready and display.
	state := fleet.Ready
	readyStatus, readyReason, readyMsg := metav1.ConditionTrue, fleet.SucceededReason, fmt.Sprintf("%d resources ready", len(st.Resources))
	switch {
	case o.Failed != nil:
		state, readyStatus, readyReason, readyMsg = fleet.ErrApplied, metav1.ConditionFalse, o.Failed.Reason, o.Failed.Message
	case o.Waiting != "":
		state, readyStatus, readyReason, readyMsg = fleet.WaitApplied, metav1.ConditionFalse, waitingReason, o.Waiting
	case o.Paused && !upToDate:
		state, readyStatus, readyReason, readyMsg = fleet.WaitApplied, metav1.ConditionFalse, fleet.PausedReason, "paused"
	case !o.Monitored:
		state, readyStatus, readyReason, readyMsg = fleet.WaitApplied, metav1.ConditionFalse, fleet.WaitingReason, "not applied yet"
	case o.MonitorError != "":
		state, readyStatus, readyReason, readyMsg = fleet.NotReady, metav1.ConditionFalse, MonitorFailedReason, o.MonitorError
	case len(o.Modified) > 0:
		state, readyStatus, readyReason, readyMsg = fleet.Modified, metav1.ConditionFalse, fleet.ModifiedReason, modifiedMessage(o.Modified)
	case len(o.NonReady) > 0:
		reason := fleet.NotReadyReason
		if o.HealthTimedOut {
			reason = HealthTimeoutReason
		}
		state, readyStatus, readyReason, readyMsg = fleet.NotReady, metav1.ConditionFalse, reason, nonReadyMessage(o.NonReady, o.HealthTimedOut)
	}
	set(fleet.ReadyCondition, readyStatus, readyReason, readyMsg)

	st.Display.State = string(state)
	st.Display.Deployed = "Yes"
	if c := meta.FindStatusCondition(st.Conditions, fleet.DeployedCondition); c.Status != metav1.ConditionTrue {
		st.Display.Deployed = c.Reason
		if o.Failed != nil {
			st.Display.Deployed = "Error: " + c.Reason
		}
	}
	st.Display.Monitored = "No"
	if c := meta.FindStatusCondition(st.Conditions, fleet.MonitoredCondition); c.Status == metav1.ConditionTrue {
		st.Display.Monitored = "Yes"
	}
	return st
}

func truncate[T any](s []T) []T {
	if len(s) > maxListed {
		return s[:maxListed]
	}
	return s
}

func modifiedMessage(m []fleet.ModifiedStatus) string {
	names := make([]string, 0, len(m))
	for _, r := range m {
		n := objRef{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}.String()
		switch {
		case r.Create:
			n += " (missing)"
		case r.Delete:
			n += " (extra)"
		}
		names = append(names, n)
	}
	return "modified: " + listNames(names)
}

func nonReadyMessage(nr []fleet.NonReadyStatus, timedOut bool) string {
	parts := make([]string, 0, len(nr))
	for _, r := range nr {
		p := objRef{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}.String()
		if sum := r.Summary.String(); sum != "" {
			p += ": " + sum
		}
		parts = append(parts, p)
	}
	prefix := "not ready: "
	if timedOut {
		prefix = "not ready after the health timeout: "
	}
	return prefix + listNames(parts)
}

// listNames joins up to three names and counts the rest.
func listNames(names []string) string {
	const show = 3
	if len(names) <= show {
		return strings.Join(names, "; ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:show], "; "), len(names)-show)
}

// shortID is the start of a deployment ID, for messages.
func shortID(id string) string {
	m, opts, ok := strings.Cut(id, ":")
	if len(m) > 14 {
		m = m[:14]
	}
	if ok && len(opts) > 8 {
		opts = opts[:8]
	}
	if ok {
		return m + ":" + opts
	}
	return m
}

// shorten keeps condition messages within the API's limit (32768) with a
// wide margin.
func shorten(s string) string {
	const maxMsg = 4096
	if len(s) > maxMsg {
		return s[:maxMsg-3] + "..."
	}
	return s
}
