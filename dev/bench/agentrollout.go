package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/rollout"
	"github.com/gitops-fleet/fleet/internal/config"
)

// runAgentRollout measures a staged agent rollout: n Clusters with agent
// Bundles, an agent setting changed in the configuration with waves of
// 10 %, until every agent runs the new revision Ready. The agents are
// simulated: one in-process writer reports each agent BundleDeployment
// applied and Ready as soon as it changes, as a healthy agent does (the
// rollout's own logic, the controller's, is what is measured).
func runAgentRollout(ctx context.Context, opts Options, step func(string, ...any)) ([]Result, error) {
	n := 1000
	if opts.Quick {
		n = 50
	}
	if opts.Clusters != 0 {
		n = opts.Clusters
	}
	step("agent-rollout: starting an upstream control plane and the controller")
	h, err := startHarness(ctx, 0, time.Hour, 1, opts)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	r, err := h.agentRollout(ctx, n, step)
	if err != nil {
		return []Result{r}, fmt.Errorf("agent-rollout: %w (controller log: %s)", err, h.ctrlLog)
	}
	return []Result{r}, nil
}

func (h *harness) agentRollout(ctx context.Context, n int, step func(string, ...any)) (Result, error) {
	r := Result{Name: "agent-rollout", Count: n, Goal: "waves of 10 %: every agent on the new revision, Ready"}
	up := h.env.Upstream.Client
	const ws = "bench-agents"
	if err := up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}}); err != nil {
		return r, err
	}
	wc, err := newWatchClient(h)
	if err != nil {
		return r, err
	}
	cw := watchClusters(ctx, wc, ws)

	// The Clusters, as their agents left them after registering.
	step("agent-rollout: %d Clusters whose agents checked in", n)
	var names []string
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		name := fmt.Sprintf("c-%05d", i)
		names = append(names, name)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := checkedIn(ctx, up, ws, name); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	agents := &standInAgents{c: up}
	go agents.run(ctx, wc)

	base := map[string]any{
		"apiServerURL": h.env.Upstream.Config.Host, "apiServerCA": b64(h.env.Upstream.Config.CAData),
		"agentCheckinInterval": "1h", "requestCredentialTTL": "24h",
	}
	if err := h.setConfig(ctx, base); err != nil {
		return r, err
	}
	if _, err := cw.wait(ctx, true, names, 10*time.Minute); err != nil {
		return r, fmt.Errorf("agents on the first revision: %w", err)
	}
	first, err := waitAgentRollout(ctx, up, "", 10*time.Minute)
	if err != nil {
		return r, err
	}

	step("agent-rollout: agentReplicas changed for %d agents, waves of 10%%", n)
	_, writes0, before, err := h.requestBreakdown(ctx)
	if err != nil {
		return r, err
	}
	standIn0 := agents.writes.Load()
	_, cpu0 := h.controllerUsage()
	pct := intstr.FromString("10%")
	changed := map[string]any{}
	for k, v := range base {
		changed[k] = v
	}
	changed["agentReplicas"] = 2
	changed["agentRollout"] = fleet.AgentRolloutStrategy{MaxUnavailable: &pct, ProgressDeadline: &metav1.Duration{Duration: 10 * time.Minute}}
	start := time.Now()
	if err := h.setConfig(ctx, changed); err != nil {
		return r, err
	}
	ro, err := waitAgentRollout(ctx, up, first.Spec.Revision, 30*time.Minute)
	wall := time.Since(start)
	if err != nil {
		return r, err
	}
	_, writes1, after, err := h.requestBreakdown(ctx)
	if err != nil {
		return r, err
	}
	rss, cpu1 := h.controllerUsage()
	standIn := float64(agents.writes.Load() - standIn0)
	r.WallS = f(wall.Seconds())
	r.ThroughputPerS = f(float64(n) / wall.Seconds())
	r.ControllerPeakRSSMB, r.ControllerCPUS = f(rss), f(cpu1-cpu0)
	r.UpstreamWritesPerRegistration = f((writes1 - writes0 - standIn) / float64(n))
	r.Notes = fmt.Sprintf("%d waves; upstream writes per cluster without the simulated agents' %.1f: %s", len(ro.Status.Waves), standIn/float64(n),
		writeBreakdown(before, after, float64(n)))
	return r, nil
}

// checkedIn makes a Cluster whose agent registered and reported its
// namespace (so it gets an agent Bundle).
func checkedIn(ctx context.Context, up client.Client, ws, name string) error {
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}, Spec: fleet.ClusterSpec{ClientID: name}}
	if err := up.Create(ctx, c); err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := up.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		c.Status.Agent = fleet.AgentStatus{Namespace: config.DefaultSystemNamespace, LastSeen: metav1.Now(), HeartbeatIntervalSeconds: 3600, Generation: ptr.To[int64](0)}
		return up.Status().Update(ctx, c)
	})
}

// setConfig replaces the controller configuration.
func (h *harness) setConfig(ctx context.Context, doc map[string]any) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{}
		if err := h.env.Upstream.Client.Get(ctx, client.ObjectKey{Namespace: config.DefaultSystemNamespace, Name: config.ConfigMapName}, cm); err != nil {
			return err
		}
		cm.Data = map[string]string{config.ConfigMapKey: string(b)}
		return h.env.Upstream.Client.Update(ctx, cm)
	})
}

// waitAgentRollout waits for the current AgentRollout, of another revision
// than skip, to be Complete.
func waitAgentRollout(ctx context.Context, up client.Client, skip string, timeout time.Duration) (*fleet.AgentRollout, error) {
	deadline := time.Now().Add(timeout)
	for {
		ro, err := rollout.Latest(ctx, up)
		if err == nil && ro.Status.Current && ro.Spec.Revision != skip && ro.Status.Phase == fleet.RolloutComplete {
			return ro, nil
		}
		if time.Now().After(deadline) {
			if ro != nil {
				return nil, fmt.Errorf("AgentRollout %s %s after %s: %s", ro.Name, ro.Status.Phase, timeout, ro.Status.Message)
			}
			return nil, fmt.Errorf("no AgentRollout after %s: %v", timeout, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// standInAgents reports every agent BundleDeployment applied and Ready
// once it changes, as a healthy agent would; writes counts its writes.
// Like a fleet of agents, it works on many BundleDeployments at once, and
// a report that fails is retried until it is written: no later event
// would bring it back.
type standInAgents struct {
	c client.Client
	// selector picks the BundleDeployments to report (nil: the agents').
	selector client.MatchingLabels
	writes   atomic.Int64
}

// standInWorkers is how many BundleDeployments the stand-in agents report
// at once. Real agents report in parallel, one per cluster, so the
// stand-ins must not be what bounds a rollout on thousands of clusters:
// each report is two round trips, as each cluster is for the controller,
// which writes 32 clusters at once (bundle.DefaultWriters); 16 stand-in
// workers would have been fewer.
const standInWorkers = 64

func (s *standInAgents) run(ctx context.Context, wc client.WithWatch) {
	sel := s.selector
	if sel == nil {
		sel = client.MatchingLabels{fleet.AgentBundleLabel: "true"}
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[client.ObjectKey](50*time.Millisecond, 5*time.Second))
	defer q.ShutDown()
	for range standInWorkers {
		go func() {
			for {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				if err := s.report(ctx, key); err != nil && ctx.Err() == nil {
					q.AddRateLimited(key)
				} else {
					q.Forget(key)
				}
				q.Done(key)
			}
		}()
	}
	for ctx.Err() == nil {
		list := &fleet.BundleDeploymentList{}
		if err := wc.List(ctx, list, sel); err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for i := range list.Items {
			if !standInDone(&list.Items[i]) {
				q.Add(client.ObjectKeyFromObject(&list.Items[i]))
			}
		}
		w, err := wc.Watch(ctx, &fleet.BundleDeploymentList{ListMeta: metav1.ListMeta{ResourceVersion: list.ResourceVersion}}, sel)
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			if bd, ok := ev.Object.(*fleet.BundleDeployment); ok && ev.Type != watch.Deleted && !standInDone(bd) {
				q.Add(client.ObjectKeyFromObject(bd))
			}
		}
		w.Stop()
	}
}

// standInDone reports whether a BundleDeployment is as a healthy agent
// leaves it.
func standInDone(bd *fleet.BundleDeployment) bool {
	st := &bd.Status
	return bd.Spec.DeploymentID == "" || st.AppliedDeploymentID == bd.Spec.DeploymentID && st.Ready && st.NonModified
}

// report writes one BundleDeployment's status as applied and Ready, on its
// latest version.
func (s *standInAgents) report(ctx context.Context, key client.ObjectKey) error {
	bd := &fleet.BundleDeployment{}
	if err := s.c.Get(ctx, key, bd); err != nil || standInDone(bd) {
		return client.IgnoreNotFound(err)
	}
	st := &bd.Status
	st.AppliedDeploymentID, st.Ready, st.NonModified = bd.Spec.DeploymentID, true, true
	if err := s.c.Status().Update(ctx, bd); err != nil {
		return client.IgnoreNotFound(err)
	}
	s.writes.Add(1)
	return nil
}
