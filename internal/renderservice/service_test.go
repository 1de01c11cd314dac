package renderservice_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/renderenv"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/renderservice"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/renderer/bundlefiles"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

// TestMain lets this test binary be the renderer the tests start, and the
// render workers that renderer starts.
func TestMain(m *testing.M) {
	renderworker.ServeIfWorker()
	renderenv.ServeIfRenderer()
	os.Exit(m.Run())
}

// startRenderer starts the renderer as a real process (this test binary)
// on 127.0.0.1 with fresh credentials.
func startRenderer(t testing.TB, opts renderenv.Options) (*renderenv.Renderer, *renderservice.Credentials) {
	t.Helper()
	creds, err := renderservice.NewCredentials("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	addr, err := renderenv.FreeAddress("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	r, err := renderenv.Start(context.Background(), addr, creds, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.Stop()
		if t.Failed() {
			t.Logf("renderer log:\n%s", r.LogTail())
		}
	})
	return r, creds
}

func defaultLimits() renderworker.Limits {
	lim := renderworker.LimitsOf(&config.Config{})
	lim.Timeout = 20 * time.Second // generous: a loaded machine starts a worker slowly
	return lim
}

func newClient(t testing.TB, url string, creds *renderservice.Credentials, mutate func(*renderworker.Limits)) *renderservice.Client {
	t.Helper()
	lim := defaultLimits()
	if mutate != nil {
		mutate(&lim)
	}
	c, err := renderservice.NewClient(url, renderservice.StaticCredentials{C: creds}, nil, func() renderworker.Limits { return lim })
	if err != nil {
		t.Fatal(err)
	}
	return c
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

func TestRenderer_RendersWhatAnInPodWorkerRenders(t *testing.T) {
	r, creds := startRenderer(t, renderenv.Options{})
	res := chartResources(configMapTemplate)
	got, err := newClient(t, r.URL, creds, nil).Render(t.Context(), "web", res, chartOptions)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := renderworker.NewPool(defaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pool.Render(t.Context(), "web", res, chartOptions)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.YAML, want.YAML) {
		t.Errorf("the renderer rendered\n%s\nan in-pod worker\n%s", got.YAML, want.YAML)
	}
	if !strings.Contains(string(got.YAML), "team: web") || !strings.Contains(string(got.YAML), "color: blue") {
		t.Errorf("chart, values or overlay missing:\n%s", got.YAML)
	}
}

// connCounter is a TCP listener on 127.0.0.1 that counts the connections it
// accepts, whatever the protocol.
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

// Bundles written to hurt, rendered by the renderer within the limits the
// controller sends: each fails with the reason and message an in-pod worker
// gives, as a *renderworker.RenderError (the Bundle's fault), and nothing
// reaches the network.
func TestRenderer_HostileBundlesFailWithTheBundlesReasonWithinTheControllersLimits(t *testing.T) {
	r, creds := startRenderer(t, renderenv.Options{})
	srv := listen(t)
	const memory = 128 << 20
	cases := []struct {
		name      string
		resources []fleet.BundleResource
		opts      fleet.BundleDeploymentOptions
		timeout   time.Duration
		reason    string
		message   string
	}{
		{name: "nested ranges burn CPU", timeout: 3 * time.Second,
			resources: chartResources(`{{ range until 2000 }}{{ range until 2000 }}{{ range until 2000 }}{{ end }}{{ end }}{{ end }}`), opts: chartOptions,
			reason: fleet.RenderTimeoutReason, message: "rendering took longer than 3s, the limit (bundleRenderTimeout)"},
		{name: "string doubling", timeout: time.Minute,
			resources: chartResources(`{{ $s := "xxxxxxxx" }}{{ range until 40 }}{{ $s = print $s $s }}{{ end }}{{ $s }}`), opts: chartOptions,
			reason: fleet.RenderOutOfMemoryReason, message: "rendering needed more than 128Mi of memory, the limit (bundleRenderMemoryLimit)"},
		{name: "gzip bomb", timeout: time.Minute,
			resources: []fleet.BundleResource{
				{Name: "ok.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"},
				{Name: "bomb.yaml", Content: renderertest.GzipBomb(t, 256<<20), Encoding: "base64+gz"},
			},
			reason: fleet.BundleTooLargeReason, message: "resources[1] (bomb.yaml) decodes to more than 16Mi, the limit per resource (bundleMaxResourceSize)"},
		{name: "remote overlay resource", timeout: time.Minute,
			resources: []fleet.BundleResource{
				{Name: "overlay/cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
				{Name: "overlay/kustomization.yaml", Content: "resources:\n- cm.yaml\n- http://" + srv.Addr().String() + "/deploy.yaml\n"},
			},
			opts:   fleet.BundleDeploymentOptions{Kustomize: &fleet.KustomizeOptions{Dir: "overlay"}},
			reason: fleet.RemoteResourceRefusedReason, message: `overlay/kustomization.yaml resources[1] "http://` + srv.Addr().String() + `/deploy.yaml" is a remote resource; Bundles may only use their own files`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if raceDetector && tc.reason == fleet.RenderOutOfMemoryReason {
				// As in renderworker: a race-enabled worker's shadow memory
				// counts against RLIMIT_AS; `make test` runs this case.
				t.Skip("the memory limit is not testable with the race detector")
			}
			c := newClient(t, r.URL, creds, func(l *renderworker.Limits) { l.Memory, l.Timeout = memory, tc.timeout })
			start := time.Now()
			_, err := c.Render(t.Context(), "hostile", tc.resources, tc.opts)
			took := time.Since(start)
			var re *renderworker.RenderError
			if !errors.As(err, &re) || re.Reason != tc.reason || !strings.Contains(re.Message, tc.message) {
				t.Fatalf("got %v (%#v), want reason %s with %q", err, re, tc.reason, tc.message)
			}
			t.Logf("%s after %s, worker peak RSS %s", re.Reason, took.Round(time.Millisecond), bundlefiles.FormatBytes(re.MaxRSS))
			if tc.reason == fleet.RenderTimeoutReason && took > tc.timeout+10*time.Second {
				t.Errorf("stopped after %s; the limit is %s", took, tc.timeout)
			}
			if tc.reason == fleet.RenderOutOfMemoryReason && re.MaxRSS > memory+256<<20 {
				t.Errorf("worker peak RSS %s, want about the %s limit", bundlefiles.FormatBytes(re.MaxRSS), bundlefiles.FormatBytes(memory))
			}
		})
	}
	if n := srv.n.Load(); n != 0 {
		t.Errorf("the address the overlay names got %d connections, want none", n)
	}
}

// The renderer runs at most --concurrency workers, whatever the controller
// asks; the controller's own bound is the configured concurrency.
func TestRenderer_BoundsItsWorkersBelowTheControllersConcurrency(t *testing.T) {
	const timeout = 2 * time.Second
	r, creds := startRenderer(t, renderenv.Options{Concurrency: 1})
	c := newClient(t, r.URL, creds, func(l *renderworker.Limits) { l.Timeout, l.Concurrency = timeout, 4 })
	loop := chartResources(`{{ range until 5000 }}{{ range until 5000 }}{{ range until 5000 }}{{ end }}{{ end }}{{ end }}`)
	var wg sync.WaitGroup
	start := time.Now()
	for range 3 {
		wg.Go(func() {
			if _, err := c.Render(t.Context(), "loop", loop, chartOptions); !errors.As(err, new(*renderworker.RenderError)) {
				t.Errorf("got %v, want RenderTimeout", err)
			}
		})
	}
	wg.Wait()
	// Three renders that each run to the limit, one at a time.
	if took := time.Since(start); took < 3*timeout {
		t.Errorf("3 renders of %s each took %s together: more than 1 ran at once", timeout, took)
	}
}

// rawRequest posts body to the renderer with the given Authorization
// header (none when empty), trusting roots.
func rawRequest(t *testing.T, url string, roots []byte, auth string, body string) (int, string, error) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(roots)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+renderservice.RenderPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// Who may call the renderer: only the holder of the controller's bearer
// token, over TLS. Every other caller is refused with 401 before its
// request is read, and renders nothing.
func TestRenderer_RefusesCallersWithoutTheControllersToken(t *testing.T) {
	r, creds := startRenderer(t, renderenv.Options{})
	body := `{"name":"web","resources":[{"name":"cm.yaml","content":"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"}],"options":{}}`
	other, err := renderservice.NewCredentials("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, auth string }{
		{"no credential", ""},
		{"another token", "Bearer " + other.Token},
		{"the token's hash, which the renderer holds", "Bearer " + renderservice.TokenHash(creds.Token)},
		{"the token in another scheme", "Basic " + creds.Token},
		{"an empty bearer token", "Bearer "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, got, err := rawRequest(t, r.URL, creds.CA, tc.auth, body)
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusUnauthorized || !strings.Contains(got, "only the fleet controller may call the renderer") || strings.Contains(got, "ConfigMap") {
				t.Errorf("got %d %q, want 401", code, got)
			}
		})
	}
	t.Run("plain HTTP", func(t *testing.T) {
		resp, err := http.Post("http://"+strings.TrimPrefix(r.URL, "https://")+renderservice.RenderPath, "application/json", strings.NewReader(body))
		if err == nil {
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode == http.StatusOK || strings.Contains(string(b), "ConfigMap") {
				t.Errorf("plain HTTP rendered: %d %s", resp.StatusCode, b)
			}
		}
	})
	t.Run("a server the controller's CA did not sign is not the renderer", func(t *testing.T) {
		_, _, err := rawRequest(t, r.URL, other.CA, "Bearer "+creds.Token, body)
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("got %v, want a certificate error", err)
		}
	})
	t.Run("the controller's token renders", func(t *testing.T) {
		code, got, err := rawRequest(t, r.URL, creds.CA, "Bearer "+creds.Token, body)
		if err != nil || code != http.StatusOK || !strings.Contains(got, `"yaml"`) {
			t.Errorf("got %d %q %v", code, got, err)
		}
	})
	if log := r.LogTail(); !strings.Contains(log, "refused a render request") || strings.Contains(log, creds.Token) {
		t.Errorf("the renderer's log should name refusals and never a token:\n%s", log)
	}
}

func TestRenderer_RefusesToStartWithAKubernetesCredentialMounted(t *testing.T) {
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("a ServiceAccount token"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := renderservice.NewCredentials("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	addr, err := renderenv.FreeAddress("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = renderenv.Start(t.Context(), addr, creds, renderenv.Options{Dir: t.TempDir(), TokenPath: token})
	if err == nil || !strings.Contains(err.Error(), "a Kubernetes credential is mounted at "+token+": the renderer runs Bundle authors' templates and must hold no credential") {
		t.Fatalf("got %v, want a refusal to start", err)
	}
}

// A renderer that is down is the controller's trouble: an
// *UnavailableError saying so, never a RenderError (the Bundle's fault),
// after a few quick retries.
func TestClient_RendererDownIsNotTheBundlesFault(t *testing.T) {
	creds, err := renderservice.NewCredentials("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	addr, err := renderenv.FreeAddress("127.0.0.1") // nobody listens there
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = newClient(t, "https://"+addr, creds, nil).Render(t.Context(), "web", chartResources(configMapTemplate), chartOptions)
	var unavailable *renderservice.UnavailableError
	if !errors.As(err, &unavailable) || errors.As(err, new(*renderworker.RenderError)) ||
		!strings.Contains(err.Error(), "the renderer (https://"+addr+"/v1/render) is unavailable") || !strings.Contains(err.Error(), "the Bundle is not at fault") {
		t.Fatalf("got %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("gave up after %s", took)
	}
	t.Log(err)
}

// A renewed certificate: the controller trusts the new CA and the previous
// one, so a renderer still serving the previous certificate (the kubelet
// has not updated its files yet) keeps rendering; once the renderer reads
// new files with a new token, the previous token is refused.
func TestRenderer_CredentialsRenewAndRotateWithoutARestart(t *testing.T) {
	dir := t.TempDir()
	r, creds := startRenderer(t, renderenv.Options{Dir: dir})
	renewed := *creds
	if err := renewed.RenewCertificate("127.0.0.1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, r.URL, &renewed, nil).Render(t.Context(), "web", chartResources(configMapTemplate), chartOptions); err != nil {
		t.Fatalf("the renewed CA bundle does not trust the previous certificate: %v", err)
	}

	rotated, err := renderservice.NewCredentials("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := renderservice.WriteServerFiles(filepath.Join(dir, "renderer-credentials"), rotated); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		code, _, err := rawRequest(t, r.URL, rotated.CA, "Bearer "+rotated.Token, `{"name":"x","options":{}}`)
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the renderer did not take the new credentials within a minute: %d %v", code, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The old CA no longer verifies it, and the old token is refused.
	if code, _, err := rawRequest(t, r.URL, append(rotated.CA, creds.CA...), "Bearer "+creds.Token, `{"name":"x","options":{}}`); err != nil || code != http.StatusUnauthorized {
		t.Errorf("the previous token: %d %v, want 401", code, err)
	}
}

func TestCredentials_Renewal(t *testing.T) {
	now := time.Now()
	c, err := renderservice.NewCredentials("fleet-renderer.cattle-fleet-system.svc")
	if err != nil {
		t.Fatal(err)
	}
	if why := c.Renewal("fleet-renderer.cattle-fleet-system.svc", now); why != "" {
		t.Errorf("fresh credentials need renewal: %s", why)
	}
	if why := c.Renewal("fleet-renderer.other.svc", now); !strings.Contains(why, "not for fleet-renderer.other.svc") {
		t.Errorf("another host: %q", why)
	}
	if why := c.Renewal("fleet-renderer.cattle-fleet-system.svc", now.Add(300*24*time.Hour)); !strings.Contains(why, "expires at") {
		t.Errorf("300 days later: %q", why)
	}
	other, err := renderservice.NewCredentials("fleet-renderer.cattle-fleet-system.svc")
	if err != nil {
		t.Fatal(err)
	}
	mixed := *c
	mixed.CA = other.CA
	if why := mixed.Renewal("fleet-renderer.cattle-fleet-system.svc", now); !strings.Contains(why, "does not verify") {
		t.Errorf("a CA that did not sign it: %q", why)
	}
	back, err := renderservice.CredentialsFromSecretData(c.SecretData())
	if err != nil || back.Token != c.Token || !bytes.Equal(back.Cert, c.Cert) {
		t.Errorf("round trip through the Secret's data: %v", err)
	}
	data := c.SecretData()
	data[renderservice.KeyTokenHash] = []byte(renderservice.TokenHash("another"))
	if _, err := renderservice.CredentialsFromSecretData(data); err == nil {
		t.Error("a token hash that is not the token's was accepted")
	}
}
