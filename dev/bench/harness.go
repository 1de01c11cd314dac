package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/renderenv"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/renderservice"
)

// harness is the benchmark's world: control planes, a controller process
// and, unless Bundles render in the controller's pod, a renderer process.
type harness struct {
	env         *controlplane.Env
	dir         string
	controllers []*exec.Cmd // one per shard
	pprofAddrs  []string    // their pprof endpoints
	metricAddrs []string    // their metrics endpoints
	ctrlLog     string
	heartbeat   time.Duration
	renderer    *renderenv.Renderer // nil: in-pod render workers
}

// startHarness starts the control planes and opts' controller (and
// renderer) with shards shards.
func startHarness(ctx context.Context, downstreams int, heartbeat time.Duration, shards int, opts Options) (*harness, error) {
	fleetBin, renderMode := opts.FleetBinary, opts.renderMode()
	// Many agents at once: leave the API server room.
	upFlags := []string{"max-requests-inflight=2000", "max-mutating-requests-inflight=1000"}
	var downFlags []string
	if opts.AuditDir != "" {
		policy, err := writeAuditPolicy(opts.AuditDir)
		if err != nil {
			return nil, err
		}
		upFlags = append(upFlags, "audit-policy-file="+policy, "audit-log-path="+filepath.Join(opts.AuditDir, "upstream.log"))
		// Appended after the upstream's: the last of a flag wins.
		downFlags = []string{"audit-log-path=" + filepath.Join(opts.AuditDir, "downstream.log")}
	}
	env, err := controlplane.Start(ctx, controlplane.Options{Downstreams: downstreams, APIServerFlags: upFlags, DownstreamAPIServerFlags: downFlags})
	if err != nil {
		return nil, err
	}
	h := &harness{env: env, heartbeat: heartbeat}
	if h.dir, err = os.MkdirTemp("", "fleet-bench-"); err != nil {
		_ = env.Stop()
		return nil, err
	}
	if err := h.writeControllerConfig(ctx); err != nil {
		h.stop()
		return nil, err
	}
	kc := filepath.Join(h.dir, "upstream.kubeconfig")
	if err := os.WriteFile(kc, env.Upstream.Kubeconfig, 0o600); err != nil {
		h.stop()
		return nil, err
	}
	// Remote rendering: the controller is told the renderer's address, makes
	// its credentials' Secret, and the renderer (`fleet renderer`) starts
	// from its files, as in a cluster.
	var rendererArgs []string
	rendererAddr := ""
	if renderMode == RenderRemote {
		if rendererAddr, err = renderenv.FreeAddress("127.0.0.1"); err != nil {
			h.stop()
			return nil, err
		}
		rendererArgs = []string{"--renderer-url", "https://" + rendererAddr}
	}
	shards = max(1, shards)
	for i := 0; i < shards; i++ {
		h.ctrlLog = filepath.Join(h.dir, fmt.Sprintf("controller-%d.log", i))
		logf, err := os.Create(h.ctrlLog)
		if err != nil {
			h.stop()
			return nil, err
		}
		pprof, err := freeAddress()
		if err != nil {
			h.stop()
			return nil, err
		}
		h.pprofAddrs = append(h.pprofAddrs, pprof)
		metrics, err := freeAddress()
		if err != nil {
			h.stop()
			return nil, err
		}
		h.metricAddrs = append(h.metricAddrs, metrics)
		args := []string{"controller", "--kubeconfig", kc, "--namespace", config.DefaultSystemNamespace,
			"--metrics-address", metrics, "--probe-address", "0", "--leader-elect=false", "--workers", "20",
			"--pprof-address", pprof, fmt.Sprintf("--shard-index=%d", i), fmt.Sprintf("--shard-count=%d", shards)}
		args = append(append(args, rendererArgs...), opts.ControllerArgs...)
		cmd := exec.Command(fleetBin, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			h.stop()
			return nil, fmt.Errorf("starting the controller (%s): %w", fleetBin, err)
		}
		h.controllers = append(h.controllers, cmd)
	}
	if rendererAddr != "" {
		if h.renderer, err = renderenv.StartFromSecret(ctx, env.Upstream.Client, config.DefaultSystemNamespace, renderservice.SecretName, rendererAddr,
			renderenv.Options{Binary: fleetBin, Dir: h.dir}); err != nil {
			h.stop()
			return nil, fmt.Errorf("starting the renderer: %w (controller log: %s)", err, h.ctrlLog)
		}
	}
	return h, nil
}

// renderStats sums the controllers' Bundle renders so far and the time
// they took (fleet_bundle_render_duration_seconds: the round trip to the
// renderer, or the in-pod worker, slot waits included).
func (h *harness) renderStats(ctx context.Context) (count, seconds float64, err error) {
	for _, addr := range h.metricAddrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			return 0, 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, fmt.Errorf("reading the controller's metrics: %w", err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			name, value, ok := strings.Cut(sc.Text(), " ")
			v, _ := strconv.ParseFloat(strings.TrimSpace(value), 64)
			switch {
			case !ok:
			case name == "fleet_bundle_render_duration_seconds_count":
				count += v
			case name == "fleet_bundle_render_duration_seconds_sum":
				seconds += v
			}
		}
		_ = resp.Body.Close()
	}
	return count, seconds, nil
}

// renderNote says where Bundles rendered and what the renderer process
// cost so far (peak RSS, CPU seconds).
func (h *harness) renderNote() string {
	if h.renderer == nil {
		return "Bundles rendered by in-pod workers (children of the controller)"
	}
	rss, cpu := processUsage(h.renderer.Pid())
	return fmt.Sprintf("Bundles rendered by the renderer process (fleet renderer, TLS on loopback): its peak RSS %.0f MB, CPU %.1f s so far, workers not counted", rss, cpu)
}

// writeControllerConfig points agents at the upstream control plane.
func (h *harness) writeControllerConfig(ctx context.Context) error {
	c := h.env.Upstream.Clientset
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: config.DefaultSystemNamespace}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	doc := fmt.Sprintf(`{"apiServerURL": %q, "apiServerCA": %q, "agentCheckinInterval": %q, "offlineAfterMissedHeartbeats": 3, "requestCredentialTTL": "24h", "manageAgent": false}`,
		h.env.Upstream.Config.Host, b64(h.env.Upstream.Config.CAData), h.heartbeat.String())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: config.DefaultSystemNamespace, Name: config.ConfigMapName},
		Data: map[string]string{config.ConfigMapKey: doc}}
	_, err := c.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	return err
}

func (h *harness) stop() {
	if h.renderer != nil {
		_ = h.renderer.Stop()
	}
	for _, c := range h.controllers {
		if c.Process == nil {
			continue
		}
		_ = c.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.Process.Kill()
		}
	}
	if h.env != nil {
		_ = h.env.Stop()
	}
	if h.dir != "" {
		_ = os.RemoveAll(h.dir)
	}
}

// controllerUsage sums the controller processes' peak RSS (MB) and CPU
// seconds so far, from /proc.
func (h *harness) controllerUsage() (peakRSSMB, cpuS float64) {
	for _, c := range h.controllers {
		rss, cpu := processUsage(c.Process.Pid)
		peakRSSMB += rss
		cpuS += cpu
	}
	return peakRSSMB, cpuS
}

func processUsage(pid int) (peakRSSMB, cpuS float64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
				peakRSSMB = kb / 1024
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command (which may hold spaces) start after ")".
		s := string(b)
		fields := strings.Fields(s[strings.LastIndex(s, ")")+1:])
		if len(fields) > 13 {
			ut, _ := strconv.ParseFloat(fields[11], 64)
			st, _ := strconv.ParseFloat(fields[12], 64)
			cpuS = (ut + st) / 100 // USER_HZ
		}
	}
	return peakRSSMB, cpuS
}

// processRSS is a process's current resident set and its anonymous part
// (heap, stacks: not the binary's pages), in MB, from /proc.
func processRSS(pid int) (rssMB, anonMB float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
		switch name {
		case "VmRSS":
			rssMB = kb / 1024
		case "RssAnon":
			anonMB = kb / 1024
		}
	}
	return rssMB, anonMB
}

// requestCounts sums the upstream API server's apiserver_request_total into
// reads (GET, LIST, WATCH) and writes (everything else).
func (h *harness) requestCounts(ctx context.Context) (reads, writes float64, err error) {
	reads, writes, _, err = h.requestBreakdown(ctx)
	return reads, writes, err
}

// requestBreakdown also returns the write count per "VERB resource[/sub]".
func (h *harness) requestBreakdown(ctx context.Context) (reads, writes float64, byKind map[string]float64, err error) {
	byKind = map[string]float64{}
	raw, err := h.env.Upstream.Clientset.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("reading upstream metrics: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		i := strings.LastIndex(line, " ")
		n, _ := strconv.ParseFloat(line[i+1:], 64)
		verb := label(line, "verb")
		switch verb {
		case "GET", "LIST", "WATCH", "WATCHLIST":
			reads += n
		case "CONNECT":
		default:
			kind := verb + " " + label(line, "resource")
			if label(line, "dry_run") != "" {
				// A dry run (a server-side apply's comparison) persists
				// nothing: named in the breakdown, not counted as a write.
				kind = "dry-run " + kind
			} else {
				writes += n
			}
			if sub := label(line, "subresource"); sub != "" {
				kind += "/" + sub
			}
			// Failed requests count as writes too; name them, so retries
			// show up as what they are.
			if code := label(line, "code"); code != "" && !strings.HasPrefix(code, "2") {
				kind += " (" + code + ")"
			}
			byKind[kind] += n
		}
	}
	return reads, writes, byKind, nil
}

// writeBreakdown formats the difference of two breakdowns per registration,
// largest first.
func writeBreakdown(before, after map[string]float64, per float64) string {
	type kv struct {
		k string
		v float64
	}
	var rows []kv
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			rows = append(rows, kv{k, d / per})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].v > rows[j].v })
	var parts []string
	other := 0.0
	for _, r := range rows {
		if r.v >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.2f", r.k, r.v))
		} else {
			other += r.v
		}
	}
	// The small ones still add up: say how much they are, so the parts
	// sum to the total.
	if other >= 0.005 {
		parts = append(parts, fmt.Sprintf("others under 0.05 each %.2f", other))
	}
	return strings.Join(parts, ", ")
}

func label(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	return rest[:strings.Index(rest, `"`)]
}

// freeAddress returns a loopback address with a free port.
func freeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// profile fetches a CPU profile of each controller over d, then a heap
// profile, into dir (no-op when dir is empty). It runs while a scenario runs.
func (h *harness) profile(ctx context.Context, dir, name string, d time.Duration) {
	if dir == "" {
		return
	}
	_ = os.MkdirAll(dir, 0o755)
	for i, addr := range h.pprofAddrs {
		fetch := func(path, file string) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
			if err != nil {
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(dir, file))
			if err != nil {
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, resp.Body)
		}
		go func() {
			fetch(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())), fmt.Sprintf("%s-controller-%d-cpu.pprof", name, i))
			fetch("/debug/pprof/heap", fmt.Sprintf("%s-controller-%d-heap.pprof", name, i))
		}()
	}
	// This process too: it runs the stand-in agents.
	if f, err := os.Create(filepath.Join(dir, name+"-bench-cpu.pprof")); err == nil {
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
		} else {
			time.AfterFunc(d, func() {
				pprof.StopCPUProfile()
				_ = f.Close()
			})
		}
	}
	// The upstream API server too: it serves every agent and the controller.
	go func() {
		raw, err := h.env.Upstream.Clientset.Discovery().RESTClient().Get().
			AbsPath("/debug/pprof/profile").Param("seconds", fmt.Sprint(int(d.Seconds()))).Timeout(d + time.Minute).DoRaw(ctx)
		if err == nil {
			_ = os.WriteFile(filepath.Join(dir, name+"-upstream-apiserver-cpu.pprof"), raw, 0o644)
		}
	}()
}

// writeAuditPolicy writes an audit policy that records every request's
// metadata (who, what, when, how long; no bodies: no Secret's content) at
// its end, and returns its path.
func writeAuditPolicy(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "audit-policy.yaml")
	policy := "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [\"RequestReceived\"]\nrules:\n- level: Metadata\n"
	return path, os.WriteFile(path, []byte(policy), 0o644)
}
