package bundle

import (
	"time"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/bundlerollout"
	"github.com/gitops-fleet/fleet/controller/summary"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/targeting"
)

// rolloutPass is what spec.rolloutStrategy lets this pass do
// (controller/bundlerollout), for the placements in their order (by
// cluster name).
type rolloutPass struct {
	targets []bundlerollout.Target
	parts   []bundlerollout.Partition
	plan    bundlerollout.Plan
}

// planRollout partitions the placements and gives each its step. An invalid
// strategy stalls the Bundle before anything is written.
func planRollout(b *fleet.Bundle, placements []*placement, groups targeting.Groups) (*rolloutPass, error) {
	rp := &rolloutPass{targets: make([]bundlerollout.Target, len(placements))}
	for i, p := range placements {
		rp.targets[i] = bundlerollout.Target{
			Cluster:      p.cluster,
			DeploymentID: bundlecontent.DeploymentID(p.render.contentID, p.opts),
			Deployment:   p.bd,
			Paused:       b.Spec.Paused || p.cluster.Spec.Paused,
		}
	}
	var err error
	if rp.parts, err = bundlerollout.Partitions(b.Spec.RolloutStrategy, rp.targets, groups); err != nil {
		return nil, reconciler.Stall(fleet.RolloutStrategyInvalidReason, "%v", err)
	}
	if rp.plan, err = bundlerollout.Decide(b.Spec.RolloutStrategy, rp.targets, rp.parts); err != nil {
		return nil, reconciler.Stall(fleet.RolloutStrategyInvalidReason, "%v", err)
	}
	for i, p := range placements {
		p.step = rp.plan.Steps[i]
		p.held = (p.step == bundlerollout.Keep || p.step == bundlerollout.Stage) && p.bd.Spec.DeploymentID != rp.targets[i].DeploymentID
	}
	return rp, nil
}

// status writes the rollout's counters and partitions into the Bundle's
// status, from the BundleDeployments as this pass left them, and returns
// how many clusters it holds back (not created yet, or kept on their
// previous deployment) and how many of them have no BundleDeployment yet.
func (rp *rolloutPass) status(b *fleet.Bundle, placements []*placement, existing map[string]*fleet.BundleDeployment) (held, skipped int) {
	bds := make([]*fleet.BundleDeployment, len(placements))
	for i, p := range placements {
		bds[i] = existing[p.namespace]
	}
	st := &b.Status
	st.NewlyCreated = rp.plan.NewlyCreated
	st.Unavailable, st.MaxUnavailable = rp.plan.Unavailable, rp.plan.MaxUnavailable
	st.UnavailablePartitions, st.MaxUnavailablePartitions = rp.plan.UnavailablePartitions, rp.plan.MaxUnavailablePartitions
	st.PartitionStatus = bundlerollout.Statuses(rp.parts, rp.plan, bds)
	for _, step := range rp.plan.Steps {
		if step == bundlerollout.Skip {
			skipped++
		}
	}
	return rp.plan.Held(rp.targets), skipped
}

// held is the Bundle's Ready condition while the rollout holds clusters
// back: PartitionUnavailable when it stopped at a partition, else
// BundleDeploymentsNotReady, with what holds it and what the
// BundleDeployments report. A pass that reached maxNew comes back for the
// rest (the creations' events bring it back too).
func (rp *rolloutPass) held(b *fleet.Bundle, held int, s fleet.BundleSummary) error {
	reason := fleet.BundleDeploymentsNotReadyReason
	if rp.plan.StoppedAt >= 0 {
		reason = fleet.PartitionUnavailableReason
	}
	msg := rp.plan.Message(b.Status.PartitionStatus, held)
	if m := summary.ReadyMessage(s); m != "" && rp.plan.StoppedAt < 0 {
		msg += "; " + m
	}
	var after time.Duration
	if rp.plan.NewlyCreated >= rp.plan.MaxNew && rp.plan.MaxNew > 0 {
		after = reconciler.CacheLagRetry
	}
	return reconciler.Wait(reason, after, "%s", msg)
}
