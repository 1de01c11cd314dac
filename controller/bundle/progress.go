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
	"github.com/gitops-fleet/fleet/controller/summary"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// A pass that writes the BundleDeployments of thousands of clusters takes
// minutes, and its status is written at its end. Meanwhile the Bundle's
// status says how far the writing is: after progressFirst, then every
// progressEvery, for a pass with at least progressMinWrites writes.
const (
	progressFirst     = 2 * time.Second
	progressEvery     = 5 * time.Second
	progressMinWrites = 100
)

// progress writes the Bundle's status while its pass writes the
// BundleDeployments: observedGeneration (the change is seen), the clusters
// done so far summarized as they are now, the others Pending.
type progress struct {
	mu      sync.Mutex
	written []fleet.BundleDeployment
	// cur is the Bundle as the last progress write left it (nil: none
	// written).
	cur *fleet.Bundle

	stop, stopped chan struct{}
}

// startProgress starts writing progress for a pass of writes on b whose
// status will count desired clusters, pending more waiting for their
// namespace. It writes through the pass's patcher, so the pass's own
// status write later diffs from the last progress write. With fewer than
// progressMinWrites writes it does nothing.
func (r *Reconciler) startProgress(ctx context.Context, b *fleet.Bundle, patcher *reconciler.StatusPatcher, writes, desired, pending int) *progress {
	pr := &progress{stop: make(chan struct{}), stopped: make(chan struct{})}
	if writes < progressMinWrites || patcher == nil {
		close(pr.stopped)
		return pr
	}
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
			written := append([]fleet.BundleDeployment(nil), pr.written...)
			pr.mu.Unlock()
			setProgress(pb, r.asSeen(ctx, written), writes, desired, pending, time.Now())
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

// asSeen is each written BundleDeployment as the cache has it now, so the
// agents' progress shows too; the version written where the cache has not
// caught up with it yet (an older generation there is the old deployment).
func (r *Reconciler) asSeen(ctx context.Context, written []fleet.BundleDeployment) []fleet.BundleDeployment {
	for i := range written {
		cur := &fleet.BundleDeployment{}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(&written[i]), cur); err == nil && cur.Generation >= written[i].Generation {
			written[i] = forSummary(cur)
		}
	}
	return written
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

// add records one cluster's BundleDeployment as written (nil: its write
// failed).
func (pr *progress) add(bd *fleet.BundleDeployment) {
	if bd == nil {
		return
	}
	pr.mu.Lock()
	pr.written = append(pr.written, forSummary(bd))
	pr.mu.Unlock()
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

// setProgress sets b's status for a pass that has written the
// BundleDeployments of written of writes clusters: the new generation is
// observed, the written ones are summarized as they are now (a changed
// one waits for its agent until it applies it), every other cluster the
// Bundle targets is Pending, and Ready is False (reason
// BundleDeploymentsNotReady) saying how far the writing is.
func setProgress(b *fleet.Bundle, written []fleet.BundleDeployment, writes, desired, pending int, now time.Time) {
	s := summary.Summarize(written)
	s.DesiredReady = desired
	s.Pending += pending + max(desired-len(written), 0)
	b.Status.Summary = s
	b.Status.ObservedGeneration = b.Generation
	b.Status.Display.ReadyClusters = fmt.Sprintf("%d/%d", s.Ready, s.DesiredReady)
	b.Status.Display.State = string(summary.WorstState(s))
	statusRules.Set(b, reconciler.Failure(reconciler.Wait(fleet.BundleDeploymentsNotReadyReason, 0,
		"writing the BundleDeployments of generation %d: %d of %d clusters done, %d Ready", b.Generation, len(written), writes, s.Ready)), now)
}
