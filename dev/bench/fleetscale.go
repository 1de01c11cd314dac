package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/agent"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/version"
)

// runFleetScale holds a large fleet (10,000 clusters by default) in steady
// state and measures what it costs upstream and in the controller, then
// how long a Bundle change takes to be Ready on every cluster.
//
// The agents are light, so ten thousand fit on one machine beside the
// control plane and the controller: one shared client sends each
// cluster's heartbeat, at the configured interval and spread over it,
// as the merge patch the real agent sends (agent.HeartbeatPatch), and one
// in-process writer reports each BundleDeployment applied and Ready as a
// healthy agent does. Everything the controller does is real: it runs as
// its own process, and its cost is what is measured.
func runFleetScale(ctx context.Context, opts Options, step func(string, ...any)) ([]Result, error) {
	n, interval, window := 10000, config.DefaultAgentCheckinInterval, 2*config.DefaultAgentCheckinInterval
	if opts.Quick {
		n, interval, window = 200, 10*time.Second, 20*time.Second
	}
	if opts.Clusters != 0 {
		n = opts.Clusters
	}
	step("fleet-steady: starting an upstream control plane and the controller")
	h, err := startHarness(ctx, 0, interval, opts.Shards, opts)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	rs, err := h.fleetScale(ctx, n, interval, window, opts.ProfileDir, step)
	if err != nil {
		return rs, fmt.Errorf("fleet-steady: %w (controller log: %s)", err, h.ctrlLog)
	}
	return rs, nil
}

func (h *harness) fleetScale(ctx context.Context, n int, interval, window time.Duration, profileDir string, step func(string, ...any)) ([]Result, error) {
	up := h.env.Upstream.Client
	const ws = "bench-fleet"
	// Agents not managed through their own Bundle: the agent Bundles'
	// rendering is measured by the agent-rollout scenario; here the fleet's
	// steady state and one application Bundle are.
	if err := h.setConfig(ctx, map[string]any{
		"apiServerURL": h.env.Upstream.Config.Host, "apiServerCA": b64(h.env.Upstream.Config.CAData),
		"agentCheckinInterval": interval.String(), "manageAgent": false,
	}); err != nil {
		return nil, err
	}
	if err := up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}}); err != nil {
		return nil, err
	}
	wc, err := newWatchClient(h)
	if err != nil {
		return nil, err
	}
	cw := watchClusters(ctx, wc, ws)

	step("fleet-steady: %d Clusters as their agents left them after registering", n)
	clusters := make([]string, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range n {
		clusters[i] = fmt.Sprintf("c-%05d", i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: clusters[i], Labels: map[string]string{"fleet": "bench"}},
				Spec: fleet.ClusterSpec{ClientID: clusters[i]}}
			if err := up.Create(ctx, c); err != nil {
				failed.Store(err)
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return nil, err
	}

	step("fleet-steady: %d light agents checking in every %s", n, interval)
	hb := &heartbeats{c: up, ws: ws, clusters: clusters, interval: interval}
	hbCtx, stopHeartbeats := context.WithCancel(ctx)
	defer stopHeartbeats()
	go hb.run(hbCtx)
	if _, err := cw.wait(ctx, true, clusters, 30*time.Minute); err != nil {
		return nil, fmt.Errorf("clusters Ready: %w", err)
	}
	if err := waitNamespacesSettled(ctx, up, 10*time.Minute); err != nil {
		return nil, err
	}
	// One interval more: the first pass of every Cluster is behind us.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(interval):
	}

	step("fleet-steady: measuring for %s", window)
	r := Result{Name: "fleet-steady", Count: n, Goal: "controller <= 500 MB and <= 10% of one core, <= 1 write per cluster per interval"}
	_, writes0, kinds0, err := h.requestBreakdown(ctx)
	if err != nil {
		return nil, err
	}
	_, cpu0 := h.controllerUsage()
	sent0 := hb.sent.Load()
	start := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(window):
	}
	_, writes1, kinds1, err := h.requestBreakdown(ctx)
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	sent := float64(hb.sent.Load() - sent0)
	if sent == 0 {
		return nil, fmt.Errorf("no heartbeat was sent in the %s window (%d failed)", elapsed.Round(time.Second), hb.failed.Load())
	}
	rss, cpu1 := h.controllerUsage()
	// The intervals the fleet went through are counted in heartbeats sent,
	// not in wall time: a stand-in that falls behind and catches up sends
	// more or fewer than one per cluster per interval of the window, and
	// that is not the controller's doing.
	intervals := sent / float64(n)
	r.WallS = f(elapsed.Seconds())
	r.ThroughputPerS = f((writes1 - writes0) / elapsed.Seconds())
	r.ControllerPeakRSSMB, r.ControllerCPUS = f(rss), f(cpu1-cpu0)
	r.Notes = fmt.Sprintf("heartbeat interval %s; writes per cluster per interval %.3f (%s), the heartbeats themselves %.0f (%.2f per cluster in the %.0f s window), other writes %.0f; controller CPU %.1f%% of one core; heartbeats sent %d, failed %d",
		interval, (writes1-writes0)/(float64(n)*intervals), writeBreakdown(kinds0, kinds1, float64(n)*intervals),
		sent, intervals, elapsed.Seconds(), writes1-writes0-sent,
		100*(cpu1-cpu0)/elapsed.Seconds(), hb.sent.Load(), hb.failed.Load())
	results := []Result{r}

	step("fleet-steady: a Bundle to all %d clusters, then a change of it", n)
	agents := &standInAgents{c: up, selector: client.MatchingLabels{fleet.BundleNamespaceLabel: ws}}
	go agents.run(hbCtx, wc)
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}, Spec: fleet.BundleSpec{
		BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: "bench-app"},
		Resources:               []fleet.BundleResource{{Name: "cm.yaml", Content: configMapManifest(0)}},
		Targets:                 []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "bench"}}}},
	}}
	first := time.Now()
	if err := up.Create(ctx, b); err != nil {
		return results, err
	}
	if err := waitBundleReady(ctx, up, b, n, 30*time.Minute); err != nil {
		return results, fmt.Errorf("the Bundle's first deployment: %w", err)
	}
	firstTook := time.Since(first)
	_, cpu0 = h.controllerUsage()
	renders0, renderS0, err := h.renderStats(ctx)
	if err != nil {
		return results, err
	}
	_, _, kinds0, err = h.requestBreakdown(ctx)
	if err != nil {
		return results, err
	}
	var changed time.Time
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := up.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Spec.Resources[0].Content = configMapManifest(1)
		changed = time.Now()
		return up.Update(ctx, b)
	}); err != nil {
		return results, err
	}
	h.profile(ctx, profileDir, "bundle-change", 30*time.Second)
	progress := followStatus(ctx, up, b)
	if err := waitBundleReady(ctx, up, b, n, 30*time.Minute); err != nil {
		return results, fmt.Errorf("the Bundle change: %w", err)
	}
	took := time.Since(changed)
	statusNote := progress.stop(changed)
	// What the passes wrote while they were writing is gone once Ready.
	if err := up.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
		return results, err
	}
	if s := b.Status.Summary; s.Pending != 0 || s.WaitApplied != 0 || !meta.IsStatusConditionTrue(b.Status.Conditions, fleet.ReadyCondition) {
		return results, fmt.Errorf("the Bundle Ready on every cluster still shows a pass's progress: summary %+v, conditions %+v", s, b.Status.Conditions)
	}
	rss, cpu1 = h.controllerUsage()
	renders1, renderS1, err := h.renderStats(ctx)
	if err != nil {
		return results, err
	}
	_, _, kinds1, err = h.requestBreakdown(ctx)
	if err != nil {
		return results, err
	}
	plain := changeWrites(kinds0, kinds1, n)
	c := Result{Name: "fleet-bundle-change", Count: n, Goal: "a Bundle change Ready on every cluster"}
	c.WallS = f(took.Seconds())
	c.ThroughputPerS = f(float64(n) / took.Seconds())
	c.ControllerPeakRSSMB, c.ControllerCPUS = f(rss), f(cpu1-cpu0)
	c.Notes = fmt.Sprintf("Bundle content changed -> every BundleDeployment applied and Ready (simulated agents) on %d clusters in %.1f s; %s; the first deployment of the Bundle took %.1f s; renders during the change %.0f, %.3f s in all; %s; controller writes per cluster for the change: %s",
		n, took.Seconds(), statusNote, firstTook.Seconds(), renders1-renders0, renderS1-renderS0, h.renderNote(), plain)
	results = append(results, c)

	step("fleet-bundle-change-partitioned: the same Bundle with %d partitions, changed again", benchPartitions)
	p, err := h.partitionedChange(ctx, up, b, n, plain)
	if err != nil {
		return results, fmt.Errorf("the partitioned change: %w", err)
	}
	return append(results, p), nil
}

// heartbeats sends every cluster's heartbeat once per interval, spread
// evenly over it, through one client.
type heartbeats struct {
	c            client.Client
	ws           string
	clusters     []string
	interval     time.Duration
	sent, failed atomic.Int64
}

func (hb *heartbeats) run(ctx context.Context) {
	work := make(chan string, 256)
	for range 16 {
		go func() {
			for name := range work {
				if err := hb.send(ctx, name); err != nil && ctx.Err() == nil {
					hb.failed.Add(1)
					continue
				}
				hb.sent.Add(1)
			}
		}()
	}
	defer close(work)
	gap := hb.interval / time.Duration(len(hb.clusters))
	next := time.Now()
	for ctx.Err() == nil {
		for _, name := range hb.clusters {
			next = next.Add(gap)
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			select {
			case <-ctx.Done():
				return
			case work <- name:
			}
		}
	}
}

func (hb *heartbeats) send(ctx context.Context, name string) error {
	patch, err := agent.HeartbeatPatch(fleet.AgentStatus{
		LastSeen: metav1.Now(), Namespace: config.DefaultSystemNamespace, Version: version.Version, KubernetesVersion: "v1.37.2",
		NodeCount: 1, ReadyNodeCount: 1, SampleNode: "node-1", Generation: ptr.To[int64](0),
		HeartbeatIntervalSeconds: int32(hb.interval / time.Second),
	})
	if err != nil {
		return err
	}
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: hb.ws, Name: name}}
	return hb.c.Status().Patch(ctx, c, client.RawPatch(types.MergePatchType, patch))
}

// waitBundleReady waits until the Bundle's status, at its current
// generation, counts n clusters Ready, and then checks that its n
// BundleDeployments are indeed applied at their current deploymentID and
// Ready. The Bundle is what a user watches; the large list is read only to
// confirm it.
func waitBundleReady(ctx context.Context, up client.Client, b *fleet.Bundle, n int, timeout time.Duration) error {
	return pollUntil(ctx, time.Second, timeout, fmt.Sprintf("Bundle Ready on %d clusters", n), func(ctx context.Context) (bool, string) {
		cur := &fleet.Bundle{}
		if err := up.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
			return false, err.Error()
		}
		if s := cur.Status.Summary; cur.Status.ObservedGeneration != cur.Generation || s.Ready != n || s.DesiredReady != n {
			return false, fmt.Sprintf("Bundle generation %d observed %d, %d of %d Ready", cur.Generation, cur.Status.ObservedGeneration, s.Ready, s.DesiredReady)
		}
		list := &fleet.BundleDeploymentList{}
		if err := up.List(ctx, list, client.MatchingLabels{fleet.BundleLabel: b.Name, fleet.BundleNamespaceLabel: b.Namespace}); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, bd := range list.Items {
			if bd.Spec.DeploymentID != "" && bd.Status.AppliedDeploymentID == bd.Spec.DeploymentID && bd.Status.Ready {
				ready++
			}
		}
		return ready == n && len(list.Items) == n,
			fmt.Sprintf("the Bundle says %d Ready; of %d BundleDeployments %d are", n, len(list.Items), ready)
	})
}

// waitNamespacesSettled waits until kube-controller-manager has made the
// default ServiceAccount of every namespace (the cluster namespaces are
// new): its writes are not the fleet's steady state.
func waitNamespacesSettled(ctx context.Context, up client.Client, timeout time.Duration) error {
	return pollUntil(ctx, 5*time.Second, timeout, "every namespace's default ServiceAccount", func(ctx context.Context) (bool, string) {
		nss := &metav1.PartialObjectMetadataList{}
		nss.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
		sas := &metav1.PartialObjectMetadataList{}
		sas.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceAccountList"))
		if err := up.List(ctx, nss); err != nil {
			return false, err.Error()
		}
		if err := up.List(ctx, sas, client.MatchingFields{"metadata.name": "default"}); err != nil {
			return false, err.Error()
		}
		return len(sas.Items) >= len(nss.Items), fmt.Sprintf("%d of %d namespaces have it", len(sas.Items), len(nss.Items))
	})
}

// statusFollower reads a Bundle's status every half second during a change
// and records when it changed: what a user watching the Bundle sees.
type statusFollower struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	// seen are the times the status (at the new generation) changed.
	seen []time.Time
	last fleet.BundleSummary
}

func followStatus(ctx context.Context, up client.Client, b *fleet.Bundle) *statusFollower {
	f := &statusFollower{done: make(chan struct{})}
	gen := b.Generation
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-f.done:
				return
			case <-t.C:
			}
			cur := &fleet.Bundle{}
			if err := up.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil || cur.Status.ObservedGeneration < gen {
				continue
			}
			f.mu.Lock()
			if len(f.seen) == 0 || !equality.Semantic.DeepEqual(cur.Status.Summary, f.last) {
				f.seen = append(f.seen, time.Now())
				f.last = cur.Status.Summary
			}
			f.mu.Unlock()
		}
	}()
	return f
}

// stop ends the following and says when the status first showed the
// change (observedGeneration) and the longest time it then went unchanged.
func (f *statusFollower) stop(changed time.Time) string {
	close(f.done)
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) == 0 {
		return "the Bundle's status never showed the change"
	}
	var gap time.Duration
	for i := 1; i < len(f.seen); i++ {
		gap = max(gap, f.seen[i].Sub(f.seen[i-1]))
	}
	return fmt.Sprintf("the Bundle's status showed the change after %.1f s, then changed %d times, at most %.1f s apart",
		f.seen[0].Sub(changed).Seconds(), len(f.seen)-1, gap.Seconds())
}
