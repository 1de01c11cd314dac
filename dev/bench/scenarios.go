package bench

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/agent"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/internal/scheme"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// newWorkspace makes a namespace and a ClusterRegistrationToken in it, and
// returns the token's values.
func (h *harness) newWorkspace(ctx context.Context, name string) (*agentvalues.Values, error) {
	up := h.env.Upstream.Client
	if err := up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		return nil, err
	}
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "bench"}}
	if err := up.Create(ctx, tok); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		s := &corev1.Secret{}
		if err := up.Get(ctx, client.ObjectKey{Namespace: name, Name: "bench"}, s); err == nil && len(s.Data[registration.TokenValuesKey]) > 0 {
			v, err := agentvalues.Parse(s.Data[registration.TokenValuesKey])
			if err != nil {
				return nil, err
			}
			if v.Token != "" {
				return v, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, errors.New("the token's values Secret did not appear within a minute: is the controller running? (see its log)")
}

// installBootstrap writes what `helm install fleet-agent` gives the agent to
// start from: its namespace, the bootstrap Secret and the ConfigMap.
func installBootstrap(ctx context.Context, ds *controlplane.ControlPlane, ns string, v *agentvalues.Values, clientID string) error {
	c := ds.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	boot := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: registration.BootstrapSecretName}, Data: map[string][]byte{
		registration.BootstrapKeyAPIServerURL:                []byte(v.APIServerURL),
		registration.BootstrapKeyAPIServerCA:                 []byte(v.APIServerCA),
		registration.BootstrapKeyClusterNamespace:            []byte(v.ClusterNamespace),
		registration.BootstrapKeySystemRegistrationNamespace: []byte(v.SystemRegistrationNamespace),
		registration.BootstrapKeyToken:                       []byte(v.Token),
		registration.BootstrapKeyTokenName:                   []byte(v.TokenName),
	}}
	if err := c.Create(ctx, boot); err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: registration.AgentConfigMapName},
		Data: map[string]string{registration.AgentConfigKey: fmt.Sprintf(`{"clientID": %q, "labels": {"bench": "true"}}`, clientID)}}
	return c.Create(ctx, cm)
}

// agents runs in-process agents and stops them all at the end.
type agents struct {
	mu      sync.Mutex
	cancels []func()
	wg      sync.WaitGroup
}

func (as *agents) start(ds *controlplane.ControlPlane, ns string, heartbeat time.Duration) (*agent.Agent, error) {
	return as.startWith(ds, ns, heartbeat, false)
}

func (as *agents) startWith(ds *controlplane.ControlPlane, ns string, heartbeat time.Duration, deployer bool) (*agent.Agent, error) {
	return as.run(agent.Options{Local: ds.Config, Namespace: ns, PodName: ns, CheckinInterval: heartbeat,
		RegistrationTimeout: 5 * time.Minute, DisableDeployer: !deployer, ResyncInterval: time.Minute})
}

// run starts an agent with opts.
func (as *agents) run(opts agent.Options) (*agent.Agent, error) {
	a, err := agent.New(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	as.mu.Lock()
	as.cancels = append(as.cancels, cancel)
	as.mu.Unlock()
	as.wg.Add(1)
	go func() {
		defer as.wg.Done()
		_ = a.Run(ctx)
	}()
	return a, nil
}

func (as *agents) stopAll() {
	as.mu.Lock()
	for _, c := range as.cancels {
		c()
	}
	as.cancels = nil
	as.mu.Unlock()
	as.wg.Wait()
}

// clusterWatch records, per Cluster of a namespace, when it was first seen
// Ready and when its agent first checked in.
type clusterWatch struct {
	mu        sync.Mutex
	ready     map[string]time.Time
	checkin   map[string]time.Time
	connected map[string]time.Time // Connected=True first seen
	changed   chan struct{}
}

func watchClusters(ctx context.Context, up client.WithWatch, ns string) *clusterWatch {
	cw := &clusterWatch{ready: map[string]time.Time{}, checkin: map[string]time.Time{}, connected: map[string]time.Time{},
		changed: make(chan struct{}, 1)}
	go func() {
		for ctx.Err() == nil {
			list := &fleet.ClusterList{}
			if err := up.List(ctx, list, client.InNamespace(ns)); err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for i := range list.Items {
				cw.observe(&list.Items[i])
			}
			w, err := up.Watch(ctx, &fleet.ClusterList{ListMeta: metav1.ListMeta{ResourceVersion: list.ResourceVersion}}, client.InNamespace(ns))
			if err != nil {
				continue
			}
			for ev := range w.ResultChan() {
				if c, ok := ev.Object.(*fleet.Cluster); ok && ev.Type != watch.Deleted {
					cw.observe(c)
				}
			}
			w.Stop()
		}
	}()
	return cw
}

func (cw *clusterWatch) observe(c *fleet.Cluster) {
	now := time.Now()
	cw.mu.Lock()
	if _, seen := cw.ready[c.Name]; !seen && meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ReadyCondition) {
		cw.ready[c.Name] = now
	}
	if _, seen := cw.checkin[c.Name]; !seen && !c.Status.Agent.LastSeen.IsZero() {
		cw.checkin[c.Name] = now
	}
	if _, seen := cw.connected[c.Name]; !seen && meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ConnectedCondition) {
		cw.connected[c.Name] = now
	}
	cw.mu.Unlock()
	select {
	case cw.changed <- struct{}{}:
	default:
	}
}

// wait blocks until every name has been seen Ready (ready) or checked in
// (!ready), and returns when.
func (cw *clusterWatch) wait(ctx context.Context, ready bool, names []string, timeout time.Duration) (map[string]time.Time, error) {
	pick := func(cw *clusterWatch) map[string]time.Time { return cw.checkin }
	if ready {
		pick = func(cw *clusterWatch) map[string]time.Time { return cw.ready }
	}
	return cw.waitFor(ctx, pick, names, timeout)
}

// waitFor blocks until pick(cw) has a time for every name, and returns them.
func (cw *clusterWatch) waitFor(ctx context.Context, pick func(*clusterWatch) map[string]time.Time, names []string, timeout time.Duration) (map[string]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		cw.mu.Lock()
		m := pick(cw)
		out := map[string]time.Time{}
		for _, n := range names {
			if t, ok := m[n]; ok {
				out[n] = t
			}
		}
		cw.mu.Unlock()
		if len(out) == len(names) {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("%d of %d clusters done within %s", len(out), len(names), timeout)
		case <-cw.changed:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func newWatchClient(h *harness) (client.WithWatch, error) {
	return client.NewWithWatch(h.env.Upstream.Config, client.Options{Scheme: scheme.Scheme})
}

// watchedWorkspace makes workspace ws with a registration token
// (newWorkspace) and watches its Clusters; it returns the token's values.
func (h *harness) watchedWorkspace(ctx context.Context, ws string) (*agentvalues.Values, *clusterWatch, error) {
	v, err := h.newWorkspace(ctx, ws)
	if err != nil {
		return nil, nil, err
	}
	wc, err := newWatchClient(h)
	if err != nil {
		return nil, nil, err
	}
	return v, watchClusters(ctx, wc, ws), nil
}

// agentInitiated: agent started with bootstrap values → fleet-agent
// credential written and the Cluster Ready upstream, one at a time.
func (h *harness) agentInitiated(ctx context.Context, n int, out io.Writer) (Result, error) {
	r := Result{Name: "agent-initiated", Count: n, Goal: "p50 <= 500 ms"}
	v, cw, err := h.watchedWorkspace(ctx, "bench-agent-initiated")
	if err != nil {
		return r, err
	}
	as := &agents{}
	defer as.stopAll()
	var samples []time.Duration
	reads0, writes0, kinds0, _ := h.requestBreakdown(ctx)
	for i := 0; i < n; i++ {
		ds := h.env.Downstreams[i%len(h.env.Downstreams)]
		clientID := fmt.Sprintf("ai-%d", i)
		ns := fmt.Sprintf("bench-ai-%d", i)
		if err := installBootstrap(ctx, ds, ns, v, clientID); err != nil {
			return r, err
		}
		start := time.Now()
		a, err := as.start(ds, ns, h.heartbeat)
		if err != nil {
			return r, err
		}
		name := names.AutoClusterName(clientID)
		got, err := cw.wait(ctx, true, []string{name}, time.Minute)
		if err != nil {
			return r, fmt.Errorf("cluster %s not Ready: %w (agent: %v)", name, err, a.ReadyCheck(nil))
		}
		samples = append(samples, got[name].Sub(start))
	}
	reads1, writes1, kinds1, _ := h.requestBreakdown(ctx)
	r.latencies(samples)
	r.UpstreamReadsPerRegistration = f((reads1 - reads0) / float64(n))
	r.UpstreamWritesPerRegistration = f((writes1 - writes0) / float64(n))
	r.Notes = "from agent start to the credential written and the Cluster Ready upstream (includes the first heartbeat); writes per registration: " +
		writeBreakdown(kinds0, kinds1, float64(n))
	return r, nil
}

// managerInitiated: Cluster + kubeconfig Secret created → agent pushed,
// started as soon as its bootstrap Secret exists (no image pull or pod start
// here), registered and first heartbeat seen upstream.
func (h *harness) managerInitiated(ctx context.Context, n int) (Result, error) {
	r := Result{Name: "manager-initiated", Count: n, Goal: "p50 <= 1500 ms"}
	ws := "bench-manager-initiated"
	up := h.env.Upstream.Client
	if err := up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}}); err != nil {
		return r, err
	}
	wc, err := newWatchClient(h)
	if err != nil {
		return r, err
	}
	cw := watchClusters(ctx, wc, ws)
	as := &agents{}
	defer as.stopAll()
	// samples split at the bootstrap Secret's arrival downstream: the
	// push (token, render, apply), then the agent's handshake.
	var samples, pushes, handshakes []time.Duration
	reads0, writes0, _ := h.requestCounts(ctx)
	for i := 0; i < n; i++ {
		ds := h.env.Downstreams[i%len(h.env.Downstreams)]
		name := fmt.Sprintf("m-%d", i)
		agentNS := "bench-mi-" + name
		secret := ds.KubeconfigSecret(ws, name+"-kubeconfig")
		if err := up.Create(ctx, secret); err != nil {
			return r, err
		}
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
			Spec: fleet.ClusterSpec{KubeConfigSecret: secret.Name, AgentNamespace: agentNS}}
		start := time.Now()
		if err := up.Create(ctx, c); err != nil {
			return r, err
		}
		if err := waitForAgentStart(ctx, ds, agentNS, time.Minute); err != nil {
			return r, fmt.Errorf("agent not pushed to cluster %s: %w", name, err)
		}
		pushed := time.Now()
		if _, err := as.start(ds, agentNS, h.heartbeat); err != nil {
			return r, err
		}
		got, err := cw.wait(ctx, false, []string{name}, time.Minute)
		if err != nil {
			return r, fmt.Errorf("cluster %s: no heartbeat: %w", name, err)
		}
		samples = append(samples, got[name].Sub(start))
		pushes = append(pushes, pushed.Sub(start))
		handshakes = append(handshakes, got[name].Sub(pushed))
	}
	reads1, writes1, _ := h.requestCounts(ctx)
	r.latencies(samples)
	r.UpstreamReadsPerRegistration = f((reads1 - reads0) / float64(n))
	r.UpstreamWritesPerRegistration = f((writes1 - writes0) / float64(n))
	r.Notes = fmt.Sprintf("from Cluster creation to the first heartbeat upstream; the push, registration and heartbeat are real, the pod start is not simulated; p50 of the push (Cluster created -> bootstrap Secret and ConfigMap downstream, seen by watches) %.1f ms, of the handshake after it (agent started -> first heartbeat) %.1f ms",
		median(pushes), median(handshakes))
	return r, nil
}

// waitForAgentStart returns once the two objects an agent reads when it
// starts are in its namespace, each seen by a watch: the bootstrap Secret
// and the agent's ConfigMap. The push applies them side by side, so either
// may land first; a real agent starts later still, when its pod runs.
func waitForAgentStart(ctx context.Context, ds *controlplane.ControlPlane, ns string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	secrets, configMaps := ds.Clientset.CoreV1().Secrets(ns), ds.Clientset.CoreV1().ConfigMaps(ns)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return waitForObject(gctx, "Secret "+ns+"/"+registration.BootstrapSecretName, registration.BootstrapSecretName,
			func(ctx context.Context, o metav1.ListOptions) (string, int, error) {
				l, err := secrets.List(ctx, o)
				if err != nil {
					return "", 0, err
				}
				return l.ResourceVersion, len(l.Items), nil
			}, secrets.Watch)
	})
	g.Go(func() error {
		return waitForObject(gctx, "ConfigMap "+ns+"/"+registration.AgentConfigMapName, registration.AgentConfigMapName,
			func(ctx context.Context, o metav1.ListOptions) (string, int, error) {
				l, err := configMaps.List(ctx, o)
				if err != nil {
					return "", 0, err
				}
				return l.ResourceVersion, len(l.Items), nil
			}, configMaps.Watch)
	})
	return g.Wait()
}

// waitForObject returns once the object named name exists: a plain watch
// from a list's resourceVersion (an informer's streaming list would hold
// the event back until the API server's bookmark that ends the list), so
// the push's figure holds no poll interval of the bench's own.
func waitForObject(ctx context.Context, what, name string, list func(context.Context, metav1.ListOptions) (string, int, error), watchFrom func(context.Context, metav1.ListOptions) (watch.Interface, error)) error {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	rv, n, err := list(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return fmt.Errorf("listing %s: %w", what, err)
	}
	if n > 0 {
		return nil
	}
	w, err := watchFrom(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv})
	if err != nil {
		return fmt.Errorf("watching %s: %w", what, err)
	}
	if _, err := watchtools.UntilWithoutRetry(ctx, w, func(ev watch.Event) (bool, error) { return ev.Type == watch.Added, nil }); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// scale registers n agent-initiated clusters at once.
func (h *harness) scale(ctx context.Context, n int, as *agents, profileDir string) (Result, []string, error) {
	r := Result{Name: "scale", Count: n, Goal: "all Ready <= 60 s, controller RSS <= 300 MB, <= 14 writes/registration before Ready, 0 leftovers"}
	ws := "bench-scale"
	v, cw, err := h.watchedWorkspace(ctx, ws)
	if err != nil {
		return r, nil, err
	}
	// Prepare every agent's namespace first: the measurement starts when all
	// agents start.
	var clusterNames []string
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		ds := h.env.Downstreams[i%len(h.env.Downstreams)]
		clientID := fmt.Sprintf("scale-%d", i)
		clusterNames = append(clusterNames, names.AutoClusterName(clientID))
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := installBootstrap(ctx, ds, fmt.Sprintf("bench-scale-%d", i), v, clientID); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return r, nil, err
	}
	reads0, writes0, kinds0, _ := h.requestBreakdown(ctx)
	// Profiled from here: the bootstrap Secrets above are the bench's own
	// set-up, the registrations below what is measured.
	h.profile(ctx, profileDir, "scale", 30*time.Second)
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := as.start(h.env.Downstreams[i%len(h.env.Downstreams)], fmt.Sprintf("bench-scale-%d", i), h.heartbeat); err != nil {
			return r, nil, err
		}
	}
	got, err := cw.wait(ctx, true, clusterNames, 10*time.Minute)
	wall := time.Since(start)
	if err != nil {
		r.Notes = err.Error()
	}
	var samples []time.Duration
	for _, t := range got {
		samples = append(samples, t.Sub(start))
	}
	reads1, writes1, kinds1, _ := h.requestBreakdown(ctx)
	rss, cpu := h.controllerUsage()
	r.latencies(samples)
	r.Notes = strings.TrimSpace(r.Notes + " writes per registration: " + writeBreakdown(kinds0, kinds1, float64(n)))
	r.WallS = f(wall.Seconds())
	r.ThroughputPerS = f(float64(len(got)) / wall.Seconds())
	r.ControllerPeakRSSMB, r.ControllerCPUS = f(rss), f(cpu)
	r.UpstreamReadsPerRegistration = f((reads1 - reads0) / float64(n))
	r.UpstreamWritesPerRegistration = f((writes1 - writes0) / float64(n))
	left, err := h.leftovers(ctx, ws, n)
	if err != nil {
		return r, clusterNames, err
	}
	r.LeftoverObjects = &left
	return r, clusterNames, nil
}

// leftovers counts registration objects beyond one registration and one
// request identity per cluster: extra ClusterRegistrations and credential
// Secrets (a sealed credential is in its registration's status; a Secret
// is one in the clear not picked up).
func (h *harness) leftovers(ctx context.Context, ws string, clusters int) (int, error) {
	up := h.env.Upstream.Client
	// Counted by metadata, 500 at a time: a list of 10,000 whole
	// registrations (with their sealed answers) from an API server still
	// busy with them timed out and ended a 10,000-cluster run.
	regs := 0
	page := &metav1.PartialObjectMetadataList{}
	page.SetGroupVersionKind(fleet.GroupVersion.WithKind("ClusterRegistrationList"))
	for {
		if err := up.List(ctx, page, client.InNamespace(ws), client.Limit(500), client.Continue(page.GetContinue())); err != nil {
			return 0, fmt.Errorf("listing ClusterRegistrations: %w", err)
		}
		regs += len(page.Items)
		if page.GetContinue() == "" {
			break
		}
	}
	secrets := &corev1.SecretList{}
	if err := up.List(ctx, secrets, client.InNamespace(config.DefaultSystemRegistrationNS)); err != nil {
		return 0, err
	}
	creds := 0
	for _, s := range secrets.Items {
		if s.Type == registration.CredentialSecretType && s.Labels[registration.RegistrationNamespaceLabel] == ws {
			creds++
		}
	}
	return max(0, regs-clusters) + creds, nil
}

// steadyState measures, with the scale scenario's clusters registered and
// reporting, what heartbeats cost upstream and in the controller.
func (h *harness) steadyState(ctx context.Context, clusters int, window time.Duration) (Result, error) {
	r := Result{Name: "steady-state", Count: clusters, Goal: "controller <= 5% of one core, <= 1 write per cluster per heartbeat interval"}
	// The latency scenarios' agents are gone: their Clusters turn Offline
	// (one status write each) some missed heartbeats later, which is not
	// the fleet's steady state. Wait for that first.
	if err := waitOthersOffline(ctx, h.env.Upstream.Client, "bench-scale", 10*time.Minute); err != nil {
		return r, err
	}
	// Let the scale scenario's tail (agent Bundles reporting, summaries
	// updating) pass first: steady state is what a registered fleet costs.
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(h.heartbeat):
	}
	_, writes0, kinds0, err := h.requestBreakdown(ctx)
	if err != nil {
		return r, err
	}
	_, cpu0 := h.controllerUsage()
	start := time.Now()
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(window):
	}
	_, writes1, kinds1, _ := h.requestBreakdown(ctx)
	// Both ends after a scrape returned: reading a big /metrics takes a
	// while, and writes during the second read must count in the window.
	elapsed := time.Since(start)
	rss, cpu1 := h.controllerUsage()
	perMinute := (writes1 - writes0) / elapsed.Minutes()
	intervals := elapsed.Seconds() / h.heartbeat.Seconds()
	r.WallS = f(elapsed.Seconds())
	r.ThroughputPerS = f((writes1 - writes0) / elapsed.Seconds())
	r.ControllerCPUS = f(cpu1 - cpu0)
	r.ControllerPeakRSSMB = f(rss)
	r.Notes = fmt.Sprintf("upstream writes/min %.0f (%s); writes per cluster per heartbeat interval (%s) %.2f; controller CPU %.1f%% of one core",
		perMinute, writeBreakdown(kinds0, kinds1, elapsed.Minutes()), h.heartbeat, (writes1-writes0)/(float64(clusters)*intervals), 100*(cpu1-cpu0)/elapsed.Seconds())
	return r, nil
}

// renderScenario renders the agent for n clusters with the chart parsed once.
func renderScenario(n int) (Result, error) {
	r := Result{Name: "render", Count: n, Goal: "<= 2 ms per cluster"}
	ar, err := renderer.NewAgentRenderer()
	if err != nil {
		return r, err
	}
	cfg := &config.Config{APIServerURL: "https://upstream.example.com:6443"}
	var samples []time.Duration
	start := time.Now()
	for i := 0; i < n; i++ {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: fmt.Sprintf("c-%d", i)},
			Spec: fleet.ClusterSpec{KubeConfigSecret: "kc", ClientID: fmt.Sprint(i), RedeployAgentGeneration: int64(i)}}
		t0 := time.Now()
		v, err := agentvalues.ForCluster(c, cfg, agentvalues.OfflineBootstrap(c))
		if err != nil {
			return r, err
		}
		if _, err := ar.Render(v); err != nil {
			return r, err
		}
		samples = append(samples, time.Since(t0))
	}
	wall := time.Since(start)
	r.latencies(samples)
	r.WallS = f(wall.Seconds())
	r.ThroughputPerS = f(float64(n) / wall.Seconds())
	r.Notes = "values + render of charts/fleet-agent per cluster; `go test -bench RenderAgent ./renderer` gives allocations"
	return r, nil
}

// bundleRollout registers max(sizes) clusters whose agents run the
// deployer, then for each size n: a Bundle targeting n clusters is created
// and Ready, its content changes, and the time until the change is applied
// and Ready on all n clusters is measured.
func (h *harness) bundleRollout(ctx context.Context, sizes []int) ([]Result, error) {
	total := 0
	for _, n := range sizes {
		total = max(total, n)
	}
	ws := "bench-rollout"
	v, cw, err := h.watchedWorkspace(ctx, ws)
	if err != nil {
		return nil, err
	}
	as := &agents{}
	defer as.stopAll()
	var clusterNames []string
	for i := 0; i < total; i++ {
		ds := h.env.Downstreams[i%len(h.env.Downstreams)]
		clientID := fmt.Sprintf("rollout-%d", i)
		ns := fmt.Sprintf("bench-rollout-%d", i)
		if err := installBootstrap(ctx, ds, ns, v, clientID); err != nil {
			return nil, err
		}
		if _, err := as.startWith(ds, ns, h.heartbeat, true); err != nil {
			return nil, err
		}
		clusterNames = append(clusterNames, names.AutoClusterName(clientID))
	}
	if _, err := cw.wait(ctx, true, clusterNames, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("clusters for the rollout: %w", err)
	}
	up := h.env.Upstream.Client
	var results []Result
	for _, n := range sizes {
		for _, c := range clusterNames[:n] {
			if err := labelCluster(ctx, up, ws, c, fmt.Sprintf("rollout-%d", n)); err != nil {
				return results, err
			}
		}
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: fmt.Sprintf("app-%d", n)}, Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: "bench-app"},
			Resources:               []fleet.BundleResource{{Name: "cm.yaml", Content: configMapManifest(0)}},
			Targets:                 []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{fmt.Sprintf("rollout-%d", n): "true"}}}},
		}}
		if err := up.Create(ctx, b); err != nil {
			return results, err
		}
		if _, err := waitRollout(ctx, up, b, n, 5*time.Minute); err != nil {
			return results, fmt.Errorf("first rollout to %d clusters: %w", n, err)
		}
		var samples []time.Duration
		rounds := 3
		for round := 1; round <= rounds; round++ {
			var start time.Time
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := up.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
					return err
				}
				b.Spec.Resources[0].Content = configMapManifest(round)
				start = time.Now()
				return up.Update(ctx, b)
			})
			if err != nil {
				return results, err
			}
			if _, err := waitRollout(ctx, up, b, n, 5*time.Minute); err != nil {
				return results, fmt.Errorf("change %d on %d clusters: %w", round, n, err)
			}
			samples = append(samples, time.Since(start))
		}
		r := Result{Name: fmt.Sprintf("bundle-rollout-%d", n), Count: rounds, Goal: "a Bundle change Ready on every cluster"}
		r.latencies(samples)
		r.Notes = fmt.Sprintf("Bundle content changed -> applied by every agent and Ready on all %d clusters (%d changes)", n, rounds)
		results = append(results, r)
	}
	return results, nil
}

func configMapManifest(round int) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bench-app\ndata:\n  round: %q\n", fmt.Sprint(round))
}

func labelCluster(ctx context.Context, up client.Client, ns, name, key string) error {
	c := &fleet.Cluster{}
	if err := up.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		return err
	}
	patch := client.MergeFrom(c.DeepCopy())
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	c.Labels[key] = "true"
	return up.Patch(ctx, c, patch)
}

// waitRollout waits until the Bundle's generation is processed and n
// BundleDeployments are applied at their current deploymentID and Ready.
func waitRollout(ctx context.Context, up client.Client, b *fleet.Bundle, n int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	for time.Now().Before(deadline) {
		cur := &fleet.Bundle{}
		if err := up.Get(ctx, client.ObjectKeyFromObject(b), cur); err == nil && cur.Status.ObservedGeneration == cur.Generation {
			list := &fleet.BundleDeploymentList{}
			if err := up.List(ctx, list, client.MatchingLabels{fleet.BundleLabel: b.Name, fleet.BundleNamespaceLabel: b.Namespace}); err == nil {
				ready := 0
				for _, bd := range list.Items {
					if bd.Spec.DeploymentID != "" && bd.Status.AppliedDeploymentID == bd.Spec.DeploymentID && bd.Status.Ready {
						ready++
					}
				}
				if ready == n && len(list.Items) == n {
					return time.Since(start), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("not Ready on %d clusters within %s", n, timeout)
}

// waitOthersOffline waits until every Cluster outside namespace keep whose
// agent once checked in is reported Offline.
func waitOthersOffline(ctx context.Context, up client.Client, keep string, timeout time.Duration) error {
	return pollUntil(ctx, 2*time.Second, timeout, "the earlier scenarios' Clusters Offline", func(ctx context.Context) (bool, string) {
		list := &fleet.ClusterList{}
		if err := up.List(ctx, list); err != nil {
			return false, err.Error()
		}
		online := 0
		for _, c := range list.Items {
			if c.Namespace == keep || c.Status.Agent.LastSeen.IsZero() {
				continue
			}
			if r := meta.FindStatusCondition(c.Status.Conditions, fleet.ReadyCondition); r == nil || r.Reason != fleet.OfflineReason {
				online++
			}
		}
		return online == 0, fmt.Sprintf("%d not Offline", online)
	})
}

// pollUntil calls check every interval until it reports done, for at most
// timeout; the error says what check last saw.
func pollUntil(ctx context.Context, interval, timeout time.Duration, what string, check func(context.Context) (done bool, status string)) error {
	last := ""
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		done, status := check(ctx)
		last = status
		return done, nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s: not within %s (%s)", what, timeout, last)
	}
	return err
}

// median is the p50 of samples in milliseconds, as Result.latencies picks it.
func median(samples []time.Duration) float64 {
	var r Result
	r.latencies(samples)
	if r.P50Ms == nil {
		return 0
	}
	return *r.P50Ms
}
