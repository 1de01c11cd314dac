package renderworker

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/bundlefiles"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

// TestMain lets this test binary be the render worker the pool starts.
func TestMain(m *testing.M) {
	ServeIfWorker()
	os.Exit(m.Run())
}

func testPool(t *testing.T, mutate func(*Limits)) *Pool {
	t.Helper()
	lim := LimitsOf(&config.Config{})
	lim.Timeout = 20 * time.Second // generous: a loaded machine starts a worker slowly
	if mutate != nil {
		mutate(&lim)
	}
	p, err := NewPool(func() Limits { return lim })
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func chartResources(template string) []fleet.BundleResource {
	return []fleet.BundleResource{
		{Name: "chart/Chart.yaml", Content: "apiVersion: v2\nname: web\nversion: 0.1.0\n"},
		{Name: "chart/values.yaml", Content: "color: red\n"},
		{Name: "chart/templates/cm.yaml", Content: template},
		{Name: "overlay/kustomization.yaml", Content: "labels:\n- pairs:\n    team: web\n"},
	}
}

var chartOptions = fleet.BundleDeploymentOptions{
	DefaultNamespace: "web",
	Helm:             &fleet.HelmOptions{Chart: "chart", Values: &fleet.GenericMap{Data: map[string]any{"color": "blue"}}},
	Kustomize:        &fleet.KustomizeOptions{Dir: "overlay"},
}

const configMapTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-settings
data:
  color: {{ .Values.color | quote }}
`

func TestPool_RendersWhatRenderFilesRenders(t *testing.T) {
	res := chartResources(configMapTemplate)
	got, err := testPool(t, nil).Render(t.Context(), "web", res, chartOptions)
	if err != nil {
		t.Fatal(err)
	}
	files, err := bundlefiles.Decode(res)
	if err != nil {
		t.Fatal(err)
	}
	want, err := renderer.RenderFiles("web", files, chartOptions)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.YAML, want.YAML) {
		t.Errorf("worker rendered\n%s\nin-process\n%s", got.YAML, want.YAML)
	}
	if !strings.Contains(string(got.YAML), "team: web") || !strings.Contains(string(got.YAML), "color: blue") {
		t.Errorf("chart, values or overlay missing:\n%s", got.YAML)
	}
}

// Templates that never finish or never stop growing, as a Bundle author
// could write them. Each must end in its reason within the limit, and the
// worker's peak memory must stay near the memory limit.
func TestPool_RunawayTemplatesAreStoppedWithAClearError(t *testing.T) {
	const memory = 128 << 20
	cases := []struct {
		name, template  string
		timeout         time.Duration
		reason, message string
	}{
		{"nested ranges burn CPU",
			`{{ range until 2000 }}{{ range until 2000 }}{{ range until 2000 }}{{ end }}{{ end }}{{ end }}`,
			3 * time.Second, fleet.RenderTimeoutReason, "rendering took longer than 3s, the limit (bundleRenderTimeout)"},
		{"include that recurses twice per level",
			`{{- define "x" }}{{ if lt (len .) 60 }}{{ include "x" (append . 1) }}{{ include "x" (append . 1) }}{{ end }}{{ end }}{{ include "x" (list) }}`,
			3 * time.Second, fleet.RenderTimeoutReason, "(bundleRenderTimeout)"},
		// Memory runs out long before these time limits, even on a busy
		// machine.
		{"range until a huge number",
			`{{ range until 100000000 }}{{ end }}`,
			time.Minute, fleet.RenderOutOfMemoryReason, "rendering needed more than 128Mi of memory, the limit (bundleRenderMemoryLimit)"},
		{"string doubling",
			`{{ $s := "xxxxxxxx" }}{{ range until 40 }}{{ $s = print $s $s }}{{ end }}{{ $s }}`,
			time.Minute, fleet.RenderOutOfMemoryReason, "(bundleRenderMemoryLimit)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if raceDetector && tc.reason == fleet.RenderOutOfMemoryReason {
				// The worker's RLIMIT_AS is its mapped size at start plus the
				// limit; the race runtime maps shadow memory for every heap
				// page, so a race-enabled worker dies in the runtime (exit
				// 66) before Go reports running out of memory. The limit
				// is not weakened for the race detector: these cases run
				// in `make test`.
				t.Skip("the memory limit is not testable with the race detector (its shadow memory counts against RLIMIT_AS)")
			}
			p := testPool(t, func(l *Limits) { l.Memory, l.Timeout = memory, tc.timeout })
			start := time.Now()
			_, err := p.Render(t.Context(), "loop", chartResources(tc.template), chartOptions)
			took := time.Since(start)
			var re *RenderError
			if !errors.As(err, &re) || re.Reason != tc.reason || !strings.Contains(re.Message, tc.message) {
				t.Fatalf("got %v (%#v), want reason %s with %q", err, re, tc.reason, tc.message)
			}
			t.Logf("%s after %s, worker peak RSS %s", re.Reason, took.Round(time.Millisecond), bundlefiles.FormatBytes(re.MaxRSS))
			if tc.reason == fleet.RenderTimeoutReason && took > tc.timeout+10*time.Second {
				t.Errorf("stopped after %s; the limit is %s", took, tc.timeout)
			}
			// The binary and the runtime take their share before the limit
			// counts; a worker that grew without bound would be at GiBs.
			if re.MaxRSS > memory+256<<20 {
				t.Errorf("worker peak RSS %s, want about the %s limit", bundlefiles.FormatBytes(re.MaxRSS), bundlefiles.FormatBytes(memory))
			}
		})
	}
}

func TestPool_GzipBombIsRefusedWithinTheLimit(t *testing.T) {
	bomb := renderertest.GzipBomb(t, 256<<20)
	t.Logf("256Mi of zeros as a %s resource", bundlefiles.FormatBytes(int64(len(bomb))))
	res := []fleet.BundleResource{
		{Name: "ok.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"},
		{Name: "bomb.yaml", Content: bomb, Encoding: "base64+gz"},
	}
	_, err := testPool(t, func(l *Limits) { l.Memory = 128 << 20 }).Render(t.Context(), "bomb", res, fleet.BundleDeploymentOptions{})
	var re *RenderError
	if !errors.As(err, &re) || re.Reason != fleet.BundleTooLargeReason || !strings.Contains(re.Message, "resources[1] (bomb.yaml) decodes to more than 16Mi, the limit per resource (bundleMaxResourceSize)") {
		t.Fatalf("got %v", err)
	}
	t.Logf("worker peak RSS %s", bundlefiles.FormatBytes(re.MaxRSS))
}

func TestPool_BoundsHowManyWorkersRunAtOnce(t *testing.T) {
	const timeout = 2 * time.Second
	p := testPool(t, func(l *Limits) { l.Timeout, l.Concurrency = timeout, 2 })
	loop := chartResources(`{{ range until 5000 }}{{ range until 5000 }}{{ range until 5000 }}{{ end }}{{ end }}{{ end }}`)
	var wg sync.WaitGroup
	var timeouts atomic.Int32
	start := time.Now()
	for range 4 {
		wg.Go(func() {
			_, err := p.Render(t.Context(), "loop", loop, chartOptions)
			if re := (*RenderError)(nil); errors.As(err, &re) && re.Reason == fleet.RenderTimeoutReason {
				timeouts.Add(1)
			} else {
				t.Errorf("got %v, want RenderTimeout", err)
			}
		})
	}
	wg.Wait()
	// Four renders that each run to the limit, two at a time: two rounds.
	if took := time.Since(start); took < 2*timeout {
		t.Errorf("4 renders of %s each took %s together: more than 2 ran at once", timeout, took)
	}
	if timeouts.Load() != 4 {
		t.Errorf("%d of 4 renders timed out", timeouts.Load())
	}
}

func TestPool_WaitingForASlotEndsWithTheContext(t *testing.T) {
	p := testPool(t, func(l *Limits) { l.Concurrency = 1 })
	if err := p.slots.Acquire(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	defer p.slots.Release()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := p.Render(ctx, "web", chartResources(configMapTemplate), chartOptions); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's error while all slots are taken", err)
	}
}

// connCounter is a TCP listener on 127.0.0.1 that counts the connections it
// accepts, whatever the protocol (HTTP, git over HTTP or ssh).
type connCounter struct {
	net.Listener
	n atomic.Int32
}

func listen(t *testing.T) *connCounter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &connCounter{Listener: l}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.n.Add(1)
			_ = conn.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	return c
}

func TestPool_RemoteOverlayResourcesAreRefusedWithoutAConnection(t *testing.T) {
	srv := listen(t)
	addr := srv.Addr().String()
	for _, remote := range []string{
		"http://" + addr + "/deploy.yaml",
		"http://" + addr + "/org/repo.git//deploy?ref=v1",
		"ssh://git@" + addr + "/org/repo//deploy?ref=v1",
	} {
		res := []fleet.BundleResource{
			{Name: "overlay/cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
			{Name: "overlay/kustomization.yaml", Content: "resources:\n- cm.yaml\n- " + remote + "\n"},
		}
		_, err := testPool(t, nil).Render(t.Context(), "remote", res, fleet.BundleDeploymentOptions{Kustomize: &fleet.KustomizeOptions{Dir: "overlay"}})
		var re *RenderError
		want := `kustomize overlay: overlay/kustomization.yaml resources[1] "` + remote + `" is a remote resource; Bundles may only use their own files`
		if !errors.As(err, &re) || re.Reason != fleet.RemoteResourceRefusedReason || re.Message != want {
			t.Errorf("got %v, want %s", err, want)
		}
	}
	if n := srv.n.Load(); n != 0 {
		t.Errorf("the server got %d connections, want none", n)
	}
}
