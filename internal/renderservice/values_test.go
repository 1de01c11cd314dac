package renderservice_test

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/renderenv"
	"github.com/gitops-fleet/fleet/internal/renderservice"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/renderer"
)

func templatedOptions() fleet.BundleDeploymentOptions {
	opts := *chartOptions.DeepCopy()
	opts.Helm.Values = &fleet.GenericMap{Data: map[string]any{"color": "${ .ClusterLabels.color }"}}
	return opts
}

var euValues = &renderer.ClusterValues{Cluster: renderer.ContextOf(&fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "eu", Labels: map[string]string{"color": "green"}}})}

// TestRenderer_TemplatesValuesPerCluster: the renderer templates a
// Bundle's values with the cluster context the controller sends.
func TestRenderer_TemplatesValuesPerCluster(t *testing.T) {
	r, creds := startRenderer(t, renderenv.Options{})
	out, err := newClient(t, r.URL, creds, nil).RenderFor(t.Context(), "web", chartResources(configMapTemplate), templatedOptions(), euValues)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out.YAML), "color: green") {
		t.Errorf("rendered\n%s\nwant color green", out.YAML)
	}
}

// TestClient_AnOlderRendererDoesNotDeployUnexpandedValues: during an
// upgrade a renderer of the previous version ignores the values inputs and
// would answer `${ }` unexpanded; the controller takes no such answer for a
// per-cluster render (RendererUnavailable, retried), and still takes its
// answers for Bundles without per-cluster values.
func TestClient_AnOlderRendererDoesNotDeployUnexpandedValues(t *testing.T) {
	creds, err := renderservice.NewCredentials("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(creds.Cert, creds.Key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	// The previous version's answer: manifests, no valuesResolved.
	old := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"yaml":"YXBpVmVyc2lvbjogdjEKa2luZDogQ29uZmlnTWFwCm1ldGFkYXRhOiB7bmFtZTogeH0KZGF0YToge2NvbG9yOiAnJHsgLkNsdXN0ZXJMYWJlbHMuY29sb3IgfSd9Cg=="}`))
	})}
	go func() { _ = old.Serve(ln) }()
	t.Cleanup(func() { _ = old.Close() })
	c := newClient(t, "https://"+ln.Addr().(*net.TCPAddr).String(), creds, nil)

	_, err = c.RenderFor(t.Context(), "web", chartResources(configMapTemplate), templatedOptions(), euValues)
	var unavailable *renderservice.UnavailableError
	if !errors.As(err, &unavailable) || !strings.Contains(err.Error(), "older than the controller") {
		t.Errorf("got %v, want the renderer unavailable: older than the controller", err)
	}
	if errors.As(err, new(*renderworker.RenderError)) {
		t.Error("the Bundle is not at fault")
	}
	if _, err := c.Render(t.Context(), "web", chartResources(configMapTemplate), chartOptions); err != nil {
		t.Errorf("a Bundle without per-cluster values: %v", err)
	}
}
