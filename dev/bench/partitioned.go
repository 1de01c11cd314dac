package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// benchPartitions is how many partitions the partitioned change has.
const benchPartitions = 5

// partitionedChange gives the fleet scenario's Bundle a rollout strategy of
// five automatic partitions (autoPartitionSize 20 %) that each let 10 % of
// their clusters be unavailable at once, then changes it and measures how
// long the change takes to be Ready everywhere and what the controller
// writes for it, against the same change without a strategy (plain, the
// fleet-bundle-change measure's writes per cluster).
func (h *harness) partitionedChange(ctx context.Context, up client.Client, b *fleet.Bundle, n int, plain string) (Result, error) {
	r := Result{Name: "fleet-bundle-change-partitioned", Count: n, Goal: "a Bundle change Ready on every cluster, partition by partition; writes per cluster per change as without partitions plus the staged steps"}
	pct := intstr.FromString(fmt.Sprintf("%d%%", 100/benchPartitions))
	unavailable := intstr.FromString("10%")
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := up.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Spec.RolloutStrategy = &fleet.RolloutStrategy{AutoPartitionSize: &pct, AutoPartitionThreshold: ptr.To(min(n, 200)), MaxUnavailable: &unavailable}
		return up.Update(ctx, b)
	}); err != nil {
		return r, err
	}
	// The strategy alone changes no deployment.
	if err := waitBundleReady(ctx, up, b, n, 10*time.Minute); err != nil {
		return r, fmt.Errorf("the rollout strategy: %w", err)
	}
	_, _, k0, err := h.requestBreakdown(ctx)
	if err != nil {
		return r, err
	}
	_, cpu0 := h.controllerUsage()
	var changed time.Time
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := up.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Spec.Resources[0].Content = configMapManifest(2)
		changed = time.Now()
		return up.Update(ctx, b)
	}); err != nil {
		return r, err
	}
	// Watch the partitions go by: the most that were ever unavailable at
	// once says whether the strategy held.
	partitions, maxSeen := 0, 0
	err = pollUntil(ctx, 200*time.Millisecond, 30*time.Minute, fmt.Sprintf("partitioned change Ready on %d clusters", n), func(ctx context.Context) (bool, string) {
		cur := &fleet.Bundle{}
		if err := up.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
			return false, err.Error()
		}
		partitions = max(partitions, len(cur.Status.PartitionStatus))
		if cur.Status.ObservedGeneration == cur.Generation {
			maxSeen = max(maxSeen, cur.Status.Unavailable)
		}
		s := cur.Status.Summary
		return cur.Status.ObservedGeneration == cur.Generation && s.Ready == n && s.DesiredReady == n,
			fmt.Sprintf("%d of %d Ready, %d unavailable, %d unavailable partition(s)", s.Ready, s.DesiredReady, cur.Status.Unavailable, cur.Status.UnavailablePartitions)
	})
	if err != nil {
		return r, err
	}
	if err := waitBundleReady(ctx, up, b, n, time.Minute); err != nil {
		return r, err
	}
	took := time.Since(changed)
	_, _, k1, err := h.requestBreakdown(ctx)
	if err != nil {
		return r, err
	}
	rss, cpu1 := h.controllerUsage()
	r.WallS = f(took.Seconds())
	r.ThroughputPerS = f(float64(n) / took.Seconds())
	r.ControllerPeakRSSMB, r.ControllerCPUS = f(rss), f(cpu1-cpu0)
	r.Notes = fmt.Sprintf("%d partitions (autoPartitionSize %s), maxUnavailable %s: Bundle content changed -> every BundleDeployment applied and Ready (simulated agents) on %d clusters in %.1f s; at most %d clusters unavailable at once (Bundle status); controller writes per cluster for the change: %s; without a strategy: %s",
		partitions, pct.String(), unavailable.String(), n, took.Seconds(), maxSeen, changeWrites(k0, k1, n), plain)
	return r, nil
}

// changeWrites says what the Bundle reconciler wrote per cluster between
// two request breakdowns: BundleDeployments, content Secrets, and the
// Bundle's status (per change, not per cluster).
func changeWrites(before, after map[string]float64, n int) string {
	var bds, secrets, status float64
	for k, v := range after {
		d := v - before[k]
		if d <= 0 || strings.HasPrefix(k, "dry-run ") {
			continue
		}
		_, res, _ := strings.Cut(k, " ")
		switch res {
		case "bundledeployments":
			bds += d
		case "secrets":
			secrets += d
		case "bundles/status":
			status += d
		}
	}
	return fmt.Sprintf("%.2f (BundleDeployments %.2f, content Secrets %.2f), plus %.0f Bundle status writes", (bds+secrets)/float64(n), bds/float64(n), secrets/float64(n), status)
}
