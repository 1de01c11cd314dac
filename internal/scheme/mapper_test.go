package scheme_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// countingTransport counts the requests that pass through it: a mapper
// makes none but discovery requests.
type countingTransport struct {
	next      http.RoundTripper
	discovery atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.discovery.Add(1)
	return c.next.RoundTrip(r)
}

// TestKnownKindsMapper: against a real API server with the fleet CRDs,
// every kind the agent uses maps to the resource and scope the server's
// discovery gives, without one discovery request; any other kind still
// maps, through discovery.
func TestKnownKindsMapper(t *testing.T) {
	env, err := controlplane.Start(t.Context(), controlplane.Options{NoControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	cfg := rest.CopyConfig(env.Upstream.Config)
	counter := &countingTransport{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	known, err := scheme.KnownKindsMapper(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := rest.HTTPClientFor(env.Upstream.Config)
	if err != nil {
		t.Fatal(err)
	}
	discovered, err := apiutil.NewDynamicRESTMapper(env.Upstream.Config, plain)
	if err != nil {
		t.Fatal(err)
	}
	for gvk := range scheme.KnownKinds {
		got, err := known.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s: %v", gvk, err)
			continue
		}
		want, err := discovered.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s: the server does not serve it: %v", gvk, err)
			continue
		}
		if got.Resource != want.Resource || got.Scope.Name() != want.Scope.Name() {
			t.Errorf("%s maps to %s (%s), the server serves it as %s (%s)", gvk, got.Resource, got.Scope.Name(), want.Resource, want.Scope.Name())
		}
	}
	if n := counter.discovery.Load(); n != 0 {
		t.Errorf("mapping the known kinds made %d discovery requests, want none", n)
	}

	deployment := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	m, err := known.RESTMapping(deployment.GroupKind(), deployment.Version)
	if err != nil {
		t.Fatalf("a kind outside the known ones: %v", err)
	}
	if m.Resource.Resource != "deployments" || counter.discovery.Load() == 0 {
		t.Errorf("apps/v1 Deployment mapped to %s after %d discovery requests, want deployments through discovery", m.Resource, counter.discovery.Load())
	}
}
