package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// tokenSource holds the bearer token the upstream client sends; renewing the
// credential swaps it without rebuilding clients.
type tokenSource struct{ token atomic.Pointer[string] }

func newTokenSource(t string) *tokenSource {
	s := &tokenSource{}
	s.set(t)
	return s
}

func (s *tokenSource) set(t string) { s.token.Store(&t) }
func (s *tokenSource) get() string  { return *s.token.Load() }

type bearerRoundTripper struct {
	src  *tokenSource
	next http.RoundTripper
}

func (b *bearerRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.src.get())
	return b.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go reach the transport underneath to
// cancel a request (a watch that times out), instead of logging that it
// cannot, every 30 s per informer.
func (b *bearerRoundTripper) WrappedRoundTripper() http.RoundTripper { return b.next }

// upstreamConfig builds a REST config for the upstream API server.
//
// TLS modes: strict trusts only the given CA. system-store first tries the
// system trust store alone (a publicly trusted upstream needs no CA) and
// falls back to the given CA when that fails.
func upstreamConfig(ctx context.Context, url string, ca []byte, mode string, tokens *tokenSource, systemCAs []byte) (*rest.Config, error) {
	if url == "" {
		return nil, errors.New("no upstream API server URL")
	}
	base := func(caData []byte) *rest.Config {
		cfg := &rest.Config{
			Host:      url,
			UserAgent: "fleet-agent",
			QPS:       20,
			Burst:     40,
			Timeout:   30 * time.Second,
		}
		cfg.TLSClientConfig.CAData = caData
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return &bearerRoundTripper{src: tokens, next: rt} }
		return cfg
	}
	switch mode {
	case config.TLSModeStrict:
		if len(ca) == 0 {
			return nil, errors.New("agentTLSMode is strict but the bootstrap has no apiServerCA")
		}
		return base(ca), nil
	case config.TLSModeSystemStore, "":
		if len(systemCAs) == 0 && reachableWithSystemStore(ctx, url) {
			return base(nil), nil
		}
		if len(systemCAs) > 0 && len(ca) == 0 {
			return base(systemCAs), nil
		}
		if len(ca) == 0 {
			return base(nil), nil
		}
		return base(ca), nil
	default:
		return nil, fmt.Errorf("unknown agentTLSMode %q (want strict or system-store)", mode)
	}
}

// reachableWithSystemStore reports whether the upstream's certificate is
// trusted by the system store alone.
func reachableWithSystemStore(ctx context.Context, url string) bool {
	pool, err := x509.SystemCertPool()
	if err != nil {
		return false
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/version", nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

func newUpstreamClient(cfg *rest.Config) (client.WithWatch, error) {
	return newClient(cfg)
}

// newClient is a client of the project's scheme that maps the kinds an
// agent uses without reading the server's discovery documents first.
func newClient(cfg *rest.Config) (client.WithWatch, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	mapper, err := scheme.KnownKindsMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme.Scheme, HTTPClient: httpClient, Mapper: mapper})
}
