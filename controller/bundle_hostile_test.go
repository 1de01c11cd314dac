package controller_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/renderer/bundlefiles"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

// memorySampler records the peak Go heap and resident memory of this process
// (the controller runs in it; render workers are children).
type memorySampler struct {
	peakHeap, peakRSS atomic.Uint64
	stop              chan struct{}
	done              sync.WaitGroup
}

func rss() uint64 {
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func sampleMemory() *memorySampler {
	s := &memorySampler{stop: make(chan struct{})}
	s.done.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if h := heapInUse(); h > s.peakHeap.Load() {
				s.peakHeap.Store(h)
			}
			if r := rss(); r > s.peakRSS.Load() {
				s.peakRSS.Store(r)
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	})
	return s
}

func (s *memorySampler) finish() { close(s.stop); s.done.Wait() }

func mib(n uint64) string { return bundlefiles.FormatBytes(int64(n)) }

// metricSum sums the series of a counter or gauge in the controller's
// metrics registry whose labels include want.
func metricSum(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// TestBundle_HostileBundlesStallWhileOthersDeploy creates a few dozen Bundles
// written to hurt the controller, all at once, and a normal one: each hostile
// Bundle ends Stalled with its reason and a message that says what to fix,
// the normal one is deployed, nothing reaches the network, and the
// controller's memory stays far below what the hostile content would take.
func TestBundle_HostileBundlesStallWhileOthersDeploy(t *testing.T) {
	const original = `{"apiServerURL": "https://upstream.example.com:6443", "apiServerCA": "dXBzdHJlYW0tY2E="}`
	setControllerConfig(t, t.Context(), `{"apiServerURL": "https://upstream.example.com:6443", "apiServerCA": "dXBzdHJlYW0tY2E=",
		"bundleRenderTimeout": "10s", "bundleRenderMemoryLimit": "192Mi", "bundleRenderConcurrency": 3}`)
	t.Cleanup(func() {
		setControllerConfig(t, context.Background(), original)
		testenv.Eventually(t, 30*time.Second, "original config back", func() error {
			if got := ctrl.Config.Get().GetBundleRenderTimeout(); got != 30*time.Second {
				return fmt.Errorf("bundleRenderTimeout %s", got)
			}
			return nil
		})
	})
	testenv.Eventually(t, 30*time.Second, "render limits in force", func() error {
		if got := ctrl.Config.Get().GetBundleRenderTimeout(); got != 10*time.Second {
			return fmt.Errorf("bundleRenderTimeout %s", got)
		}
		return nil
	})

	// Anything that connects here was fetched by kustomize or git.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	var connections atomic.Int32
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			connections.Add(1)
			_ = conn.Close()
		}
	}()
	addr := lis.Addr().String()

	ws := testenv.Namespace(t, up, "fleet-hostile-")
	newCluster(t, ws, "c1", map[string]string{"env": "prod"})
	toC1 := []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}
	chart := func(template string) []fleet.BundleResource {
		return []fleet.BundleResource{
			{Name: "chart/Chart.yaml", Content: "apiVersion: v2\nname: hostile\nversion: 0.1.0\n"},
			{Name: "chart/templates/t.yaml", Content: template},
		}
	}
	bomb := renderertest.GzipBomb(t, 256<<20)     // 16 times the per-resource limit
	twelveMiB := renderertest.GzipBomb(t, 12<<20) // three of them: over the total only

	type hostile struct {
		bundle          *fleet.Bundle
		reason, message string
	}
	var hostiles []hostile
	add := func(name string, spec fleet.BundleSpec, reason, message string) {
		hostiles = append(hostiles, hostile{&fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}, Spec: spec}, reason, message})
	}
	for i := range 8 {
		// Half target the cluster, half nothing yet: both are reported.
		spec := fleet.BundleSpec{Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
			{Name: "bomb.yaml", Content: bomb, Encoding: "base64+gz"}}}
		if i%2 == 0 {
			spec.Targets = toC1
		}
		add(fmt.Sprintf("gzip-bomb-%d", i), spec, fleet.BundleTooLargeReason,
			"resources[1] (bomb.yaml) decodes to more than 16Mi, the limit per resource (bundleMaxResourceSize)")
	}
	for i := range 4 {
		add(fmt.Sprintf("too-large-together-%d", i), fleet.BundleSpec{Targets: toC1, Resources: []fleet.BundleResource{
			{Name: "a.yaml", Content: twelveMiB, Encoding: "base64+gz"}, {Name: "b.yaml", Content: twelveMiB, Encoding: "base64+gz"},
			{Name: "c.yaml", Content: twelveMiB, Encoding: "base64+gz"}}},
			fleet.BundleTooLargeReason, "resources[2] (c.yaml): the Bundle's resources decode to more than 32Mi together, the limit (bundleMaxSize)")
	}
	for i := range 4 {
		add(fmt.Sprintf("cpu-loop-%d", i), fleet.BundleSpec{Targets: toC1,
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart"}},
			Resources:               chart(`{{ range until 5000 }}{{ range until 5000 }}{{ range until 5000 }}{{ end }}{{ end }}{{ end }}`)},
			fleet.RenderTimeoutReason, "cluster c1: rendering took longer than 10s, the limit (bundleRenderTimeout)")
	}
	memReason, memMessage := fleet.RenderOutOfMemoryReason, "cluster c1: rendering needed more than 192Mi of memory, the limit (bundleRenderMemoryLimit)"
	if raceDetector {
		// A race-enabled worker dies in the runtime before it reaches the
		// limit (its shadow memory counts against RLIMIT_AS); the Bundle
		// must still stall while the others deploy. make test checks the
		// reason and message without the race detector.
		memReason, memMessage = fleet.RenderFailedReason, "cluster c1: the render worker crashed"
	}
	for i := range 4 {
		// One allocation far over the limit: out of memory at once, however
		// busy the machine (renderworker's tests cover slow growth).
		add(fmt.Sprintf("memory-bomb-%d", i), fleet.BundleSpec{Targets: toC1,
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart"}},
			Resources:               chart(`{{ repeat 400000000 "x" }}`)},
			memReason, memMessage)
	}
	// `${ }` values templates run in the same workers, under the same
	// limits, never in the controller.
	valuesTemplate := func(tmpl string) fleet.BundleSpec {
		return fleet.BundleSpec{Targets: toC1,
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart",
				Values: &fleet.GenericMap{Data: map[string]any{"x": tmpl}}}},
			Resources: chart("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")}
	}
	add("values-memory-bomb", valuesTemplate(`${ repeat 400000000 "x" | len }`), memReason, memMessage)
	add("values-cpu-loop", valuesTemplate(`${ range until 5000 }${ range until 5000 }${ range until 5000 }${ end }${ end }${ end }`),
		fleet.RenderTimeoutReason, "cluster c1: rendering took longer than 10s, the limit (bundleRenderTimeout)")
	for i, remote := range []string{
		"http://" + addr + "/deploy.yaml", "https://" + addr + "/deploy.yaml", "github.com/org/repo//deploy?ref=v1",
		"ssh://git@" + addr + "/org/repo.git//deploy", "git::http://" + addr + "/org/repo//deploy", "git@" + addr + ":org/repo.git",
	} {
		add(fmt.Sprintf("remote-%d", i), fleet.BundleSpec{Targets: toC1,
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{Kustomize: &fleet.KustomizeOptions{Dir: "overlay"}},
			Resources: []fleet.BundleResource{
				{Name: "overlay/cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
				{Name: "overlay/kustomization.yaml", Content: "resources:\n- cm.yaml\n- " + remote + "\n"},
			}},
			fleet.RemoteResourceRefusedReason, `overlay/kustomization.yaml resources[1] "`+remote+`" is a remote resource; Bundles may only use their own files`)
	}

	runtime.GC()
	heapBefore, rssBefore := heapInUse(), rss()
	mem := sampleMemory()
	start := time.Now()
	var wg sync.WaitGroup
	for _, h := range hostiles {
		wg.Go(func() {
			if err := up.Create(t.Context(), h.bundle); err != nil {
				t.Errorf("creating %s: %v", h.bundle.Name, err)
			}
		})
	}
	wg.Go(func() {
		if err := up.Create(t.Context(), webBundle(ws)); err != nil {
			t.Errorf("creating web: %v", err)
		}
	})
	wg.Wait()

	// The normal Bundle deploys while the hostile ones take their turns: in
	// the worst case it renders after all of them, three at a time.
	testenv.Eventually(t, 2*time.Minute, "web deployed to c1", func() error {
		if got := deployedTo(t, ws, "web"); len(got) != 1 || got[0] != "c1" {
			return fmt.Errorf("deployed to %v", got)
		}
		return nil
	})
	if got := content(t, ws, "c1", "web"); !strings.Contains(got, "team: web") || !strings.Contains(got, `replicas: "3"`) {
		t.Errorf("web content:\n%s", got)
	}
	webDeployed := time.Since(start)

	stalledAt := map[string]time.Duration{}
	testenv.Eventually(t, 3*time.Minute, fmt.Sprintf("%d hostile Bundles Stalled with their reasons", len(hostiles)), func() error {
		var waiting []string
		for _, h := range hostiles {
			if _, ok := stalledAt[h.bundle.Name]; ok {
				continue
			}
			b := &fleet.Bundle{}
			if err := up.Get(t.Context(), client.ObjectKeyFromObject(h.bundle), b); err != nil {
				return err
			}
			s := meta.FindStatusCondition(b.Status.Conditions, fleet.StalledCondition)
			if s == nil || s.Status != metav1.ConditionTrue || s.Reason != h.reason || !strings.Contains(s.Message, h.message) {
				waiting = append(waiting, fmt.Sprintf("%s: %+v", h.bundle.Name, s))
				continue
			}
			if r := meta.FindStatusCondition(b.Status.Conditions, fleet.ReadyCondition); r == nil || r.Status != metav1.ConditionFalse || r.Reason != h.reason {
				return fmt.Errorf("%s: Ready %+v", h.bundle.Name, r)
			}
			stalledAt[h.bundle.Name] = time.Since(start)
		}
		if len(waiting) > 0 {
			return fmt.Errorf("%d not yet: %s", len(waiting), strings.Join(waiting, "; "))
		}
		return nil
	})
	mem.finish()
	runtime.GC()
	heapAfter := heapInUse()

	// Reconciles that change nothing render nothing: a new label on the
	// cluster reconciles every Bundle of the workspace again, and the
	// outcomes come from the controller's memory of them.
	renders := metricSum(t, "fleet_bundle_renders_total", nil)
	reconciles := metricSum(t, "controller_runtime_reconcile_total", map[string]string{"controller": "bundle"})
	updateCluster(t, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "c1"}}, func(c *fleet.Cluster) { c.Labels["touched"] = "yes" })
	testenv.Eventually(t, time.Minute, "every Bundle of the workspace reconciled again", func() error {
		done := metricSum(t, "controller_runtime_reconcile_total", map[string]string{"controller": "bundle"}) - reconciles
		if depth := metricSum(t, "workqueue_depth", map[string]string{"name": "bundle"}); done < float64(len(hostiles)+1) || depth > 0 {
			return fmt.Errorf("%v reconciles, %v queued", done, depth)
		}
		return nil
	})
	if n := metricSum(t, "fleet_bundle_renders_total", nil) - renders; n != 0 {
		t.Errorf("%v renders for %d reconciles that changed nothing, want none", n, len(hostiles)+1)
	}

	byReason := map[string][]time.Duration{}
	for _, h := range hostiles {
		byReason[h.reason] = append(byReason[h.reason], stalledAt[h.bundle.Name])
		if got := deployedTo(t, ws, h.bundle.Name); len(got) != 0 {
			t.Errorf("%s was deployed to %v", h.bundle.Name, got)
		}
	}
	reasons := make([]string, 0, len(byReason))
	for r := range byReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		ds := byReason[r]
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		t.Logf("%-22s %2d Bundles Stalled after %s .. %s", r, len(ds), ds[0].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	t.Logf("web deployed after %s", webDeployed.Round(time.Millisecond))
	t.Logf("controller process: heap in use %s before, peak %s, %s after; RSS %s before, peak %s",
		mib(heapBefore), mib(mem.peakHeap.Load()), mib(heapAfter), mib(rssBefore), mib(mem.peakRSS.Load()))

	if n := connections.Load(); n != 0 {
		t.Errorf("%d connections to the address the remote resources name, want none", n)
	}
	// Decoded in the controller, the bombs alone would take 8 x 16Mi (at
	// the limit) or 8 x 256Mi (without one); the renders run in workers.
	if grew := int64(mem.peakHeap.Load()) - int64(heapBefore); grew > 128<<20 {
		t.Errorf("the controller's heap grew by %s while hostile Bundles rendered", mib(uint64(grew)))
	}
}

// TestBundle_ChangeThatDoesNotRenderKeepsTheLastDeployment: a Bundle changed
// into one that does not render is Stalled, and its clusters keep what they
// run (their BundleDeployment and content stay as they were) until it
// renders again.
func TestBundle_ChangeThatDoesNotRenderKeepsTheLastDeployment(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-broken-change-")
	newCluster(t, ws, "c1", map[string]string{"env": "prod"})
	b := webBundle(ws)
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, ws, "web", "c1")
	before := content(t, ws, "c1", "web")
	key := client.ObjectKey{Namespace: names.ClusterNamespace(ws, "c1"), Name: "web"}
	bd := &fleet.BundleDeployment{}
	if err := up.Get(t.Context(), key, bd); err != nil {
		t.Fatal(err)
	}
	deployed := bd.Spec.DeploymentID

	updateBundle(t, b, func(b *fleet.Bundle) {
		b.Spec.Targets[0].Helm.Values.Data["replicas"] = 9 // c1's target
		b.Spec.Resources[3].Content = "resources:\n- https://example.com/extra.yaml\n"
	})
	testenv.Eventually(t, time.Minute, "Stalled RemoteResourceRefused", func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		s := meta.FindStatusCondition(b.Status.Conditions, fleet.StalledCondition)
		if s == nil || s.Reason != fleet.RemoteResourceRefusedReason || b.Status.ObservedGeneration != b.Generation {
			return fmt.Errorf("conditions %+v", b.Status.Conditions)
		}
		return nil
	})
	if err := up.Get(t.Context(), key, bd); err != nil {
		t.Fatalf("the BundleDeployment went with the broken change: %v", err)
	}
	if bd.Spec.DeploymentID != deployed || content(t, ws, "c1", "web") != before {
		t.Errorf("the deployment changed: %s, was %s", bd.Spec.DeploymentID, deployed)
	}

	updateBundle(t, b, func(b *fleet.Bundle) { b.Spec.Resources[3].Content = "labels:\n- pairs:\n    team: web\n" })
	testenv.Eventually(t, time.Minute, "the fixed Bundle deployed", func() error {
		if got := content(t, ws, "c1", "web"); !strings.Contains(got, `replicas: "9"`) {
			return fmt.Errorf("content:\n%s", got)
		}
		return nil
	})
}
