package bundle

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/bundlerollout"
	"github.com/gitops-fleet/fleet/controller/summary"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// A pass that writes the BundleDeployments of thousands of clusters takes
// minutes, and its status is written at its end. Meanwhile the Bundle's
// status says how far the writing is: after progressFirst, then every
// progressEvery, for a pass that changes the deployment of at least
// progressMinWrites clusters.
const (
	progressFirst     = 2 * time.Second
	progressEvery     = 5 * time.Second
	progressMinWrites = 100
)

// progress writes the Bundle's status while its pass writes the
// BundleDeployments: observedGeneration (the change is seen), every
// targeted cluster as it is now, except those whose deployment the pass
// changes and has not written yet: Pending.
type progress struct {
	mu sync.Mutex
	// seen are the targeted clusters' BundleDeployments (forSummary) by
	// namespace: at first those the pass does not change, then each one
	// as the pass writes it.
	seen map[string]fleet.BundleDeployment
	// changing are the namespaces whose deployment the pass changes;
	// done how many of them it has written.
	changing map[string]bool
	done     int
	// cur is the Bundle as the last progress write left it (nil: none
	// written).
	cur *fleet.Bundle

	stop, stopped chan struct{}
}

// changes reports whether writing p changes the deployment its cluster
// has: a new BundleDeployment, or another deployment (staged) ID.
func changes(p *placement, depID string) bool {
	switch {
	case p.bd == nil:
		return true
	case p.step == bundlerollout.Deploy:
		return p.bd.Spec.DeploymentID != depID
	case p.step == bundlerollout.Stage:
		return p.bd.Spec.StagedDeploymentID != depID
	}
	return false
}

// startProgress starts writing progress for a pass on b that writes
// writes of placements; keep are the namespaces the Bundle's status
// counts, existing their BundleDeployments, pending the clusters waiting
// for their namespace. It writes through the pass's patcher, so the pass's
// own status write later diffs from the last progress write. When fewer
// than progressMinWrites clusters change, it does nothing.
func (r *Reconciler) startProgress(ctx context.Context, b *fleet.Bundle, patcher *reconciler.StatusPatcher, writes []*placement,
	renders *reconcileRenders, keep map[string]bool, existing map[string]*fleet.BundleDeployment, pending int) *progress {
	pr := &progress{seen: map[string]fleet.BundleDeployment{}, changing: map[string]bool{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	for _, p := range writes {
		contentID, _, _ := renders.outcome(p.render)
		if changes(p, bundlecontent.DeploymentID(contentID, p.opts)) {
			pr.changing[p.namespace] = true
		}
	}
	if len(pr.changing) < progressMinWrites || patcher == nil {
		close(pr.stopped)
		return pr
	}
	for ns := range keep {
		if bd := existing[ns]; bd != nil && !pr.changing[ns] {
			pr.seen[ns] = forSummary(bd)
		}
	}
	desired := len(keep)
	base := b.DeepCopy() // b is read by the writers meanwhile, never changed
	go func() {
		defer close(pr.stopped)
		t := time.NewTimer(progressFirst)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-pr.stop:
				return
			case <-t.C:
			}
			pb := base
			if pr.cur != nil {
				pb = pr.cur
			}
			pb = pb.DeepCopy()
			pr.mu.Lock()
			seen := make([]fleet.BundleDeployment, 0, len(pr.seen))
			for _, bd := range pr.seen {
				seen = append(seen, bd)
			}
			done := pr.done
			pr.mu.Unlock()
			setProgress(pb, r.asSeen(ctx, seen), done, len(pr.changing), desired, pending, time.Now())
			if err := patcher.Patch(ctx, pb); err != nil {
				// Another writer changed the Bundle: the pass's own write
				// will say so; no more progress in this pass.
				ctrl.LoggerFrom(ctx).V(1).Info("writing the Bundle's progress", "error", err.Error())
				return
			}
			pr.cur = pb
			t.Reset(progressEvery)
		}
	}()
	return pr
}

// asSeen is each BundleDeployment as the cache has it now, so the agents'
// progress shows too; the version written where the cache has not caught
// up with it yet (an older generation there is the old deployment).
func (r *Reconciler) asSeen(ctx context.Context, bds []fleet.BundleDeployment) []fleet.BundleDeployment {
	for i := range bds {
		cur := &fleet.BundleDeployment{}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(&bds[i]), cur); err == nil && cur.Generation >= bds[i].Generation {
			bds[i] = forSummary(cur)
		}
	}
	return bds
}

// forSummary is what summary.Summarize reads of bd: on thousands of
// clusters, the options and values of each need not be kept meanwhile.
func forSummary(bd *fleet.BundleDeployment) fleet.BundleDeployment {
	return fleet.BundleDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: bd.Namespace, Name: bd.Name, Generation: bd.Generation},
		Spec:       fleet.BundleDeploymentSpec{DeploymentID: bd.Spec.DeploymentID, StagedDeploymentID: bd.Spec.StagedDeploymentID},
		Status:     bd.Status,
	}
}

// add records one cluster's BundleDeployment as the pass wrote it (or
// found it).
func (pr *progress) add(bd *fleet.BundleDeployment) {
	if bd == nil {
		return
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if _, ok := pr.seen[bd.Namespace]; !ok && pr.changing[bd.Namespace] {
		pr.done++
	}
	pr.seen[bd.Namespace] = forSummary(bd)
}

// end stops the progress writes and brings b up to the last one: its
// resourceVersion (the pass's status write is made against it) and its
// conditions (their transition times hold).
func (pr *progress) end(b *fleet.Bundle) {
	close(pr.stop)
	<-pr.stopped
	if pr.cur != nil {
		b.ResourceVersion = pr.cur.ResourceVersion
		b.Status.Conditions = pr.cur.Status.Conditions
	}
}

// setProgress sets b's status for a pass that has written done of the
// changing clusters whose deployment it changes: the new generation is
// observed, seen (the targeted clusters but the changing ones not written
// yet) are summarized as they are (a changed one waits for its agent until
// it applies it), the changing clusters not written yet and the pending
// ones (waiting for their namespace) are Pending, and Ready is False
// (reason BundleDeploymentsNotReady) saying how far the writing is.
func setProgress(b *fleet.Bundle, seen []fleet.BundleDeployment, done, changing, desired, pending int, now time.Time) {
	s := summary.Summarize(seen)
	s.DesiredReady = desired
	s.Pending += pending + max(changing-done, 0)
	b.Status.Summary = s
	b.Status.ObservedGeneration = b.Generation
	b.Status.Display.ReadyClusters = fmt.Sprintf("%d/%d", s.Ready, s.DesiredReady)
	b.Status.Display.State = string(summary.WorstState(s))
	statusRules.Set(b, reconciler.Failure(reconciler.Wait(fleet.BundleDeploymentsNotReadyReason, 0,
		"writing the BundleDeployments of generation %d: %d of %d clusters changed, %d of %d Ready", b.Generation, done, changing, s.Ready, desired)), now)
}
