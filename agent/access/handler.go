// Package access is the agent's side of cluster access through the manager
// (docs/design/cluster-access.md): the one handler the tunnel delivers user requests
// to. For each request it verifies the identity assertion fleet-proxy
// signed, refuses Impersonate-* headers, strips credentials and proxy
// headers, ensures the user's impersonator (a ServiceAccount whose
// ClusterRole allows impersonating exactly fleet:<user>, fleet:<groups>, the
// uid and allow-listed extras), and forwards the request to the local
// kube-apiserver with the impersonator's token and the Impersonate-*
// headers. Upgrades (exec, attach, port-forward; SPDY and WebSocket) and
// watches pass through k8s.io/apimachinery's UpgradeAwareHandler.
//
// The token and the Impersonate-* headers are added by the last round
// tripper before the wire, never earlier, so nothing the request carries
// (not even a Connection header naming them) can remove them; and if they
// were lost anyway, the impersonator alone may do nothing (fail closed).
package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/headers"
)

// Options configure a Handler.
type Options struct {
	// Audience is this cluster's audience, "<workspace>/<cluster>".
	Audience string
	// Verifier checks the assertions.
	Verifier *assertion.Verifier
	// RefreshKeys, if set, is called when an assertion names an unknown key
	// (at most every RefreshMinInterval); the keys it returns replace the
	// Verifier's.
	RefreshKeys func(context.Context) (*assertion.KeySet, error)
	// KeysChanged, if set, is called with the keys after each refresh
	// (the direct endpoint keeps them for a restart without the upstream).
	KeysChanged func(*assertion.KeySet)
	// Local is the agent's own config for the local kube-apiserver: it
	// manages the impersonators with it. Requests are forwarded to the same
	// server with its TLS settings but never its credentials.
	Local *rest.Config
	// Namespace of the impersonators (default cattle-impersonation-system).
	Namespace string
	// TokenTTL is the lifetime asked of the TokenRequest API (default 1 h).
	TokenTTL time.Duration
	// UnusedAfter is how long an impersonator may go unused before the GC
	// removes it (default 7 days).
	UnusedAfter time.Duration
	// GCInterval is how often Run collects (default 1 h).
	GCInterval time.Duration
	// KeysInterval is how often Run reads the signing keys (default
	// DefaultKeysInterval).
	KeysInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Log never receives a token or an assertion.
	Log logr.Logger
	// APIAudiences are the local API server's audiences: the token webhook
	// (ServeTokenReview) answers only reviews for them or for none.
	APIAudiences []string
	// Direct makes the Handler the direct endpoint's: Registerer gets only
	// its metrics (fleet_agent_direct_requests_total,
	// fleet_agent_direct_refused_total).
	Direct bool
	// Registerer, when set, gets the impersonator metrics
	// (fleet_agent_impersonators, fleet_agent_impersonator_token_requests_total,
	// fleet_agent_impersonators_collected_total); nil registers none.
	Registerer prometheus.Registerer
}

// RefreshMinInterval bounds how often RefreshKeys is called.
const RefreshMinInterval = 10 * time.Second

// DefaultKeysInterval is how often the signing keys are read besides on an
// unknown kid. Every fleet-proxy replica publishes a key of its own when it
// starts, so this bounds how long a key is unknown to an agent that sees
// none of its assertions, which matters for the direct endpoint: a direct
// token of that key is refused while the upstream is unreachable.
const DefaultKeysInterval = 10 * time.Minute

// Handler is the agent's access handler.
type Handler struct {
	opts  Options
	imp   *impersonators
	proxy *proxy.UpgradeAwareHandler

	refreshMu   sync.Mutex
	lastRefresh time.Time
	// refreshes counts the reads of the keys, so that requests that waited
	// for one share it.
	refreshes uint64
}

// New returns a Handler.
func New(opts Options) (*Handler, error) {
	if opts.Audience == "" || opts.Verifier == nil || opts.Local == nil {
		return nil, errors.New("access: Audience, Verifier and Local are required")
	}
	if opts.Namespace == "" {
		opts.Namespace = Namespace
	}
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = time.Hour
	}
	if opts.UnusedAfter <= 0 {
		opts.UnusedAfter = 7 * 24 * time.Hour
	}
	if opts.GCInterval <= 0 {
		opts.GCInterval = time.Hour
	}
	if opts.KeysInterval <= 0 {
		opts.KeysInterval = DefaultKeysInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cs, err := kubernetes.NewForConfig(opts.Local)
	if err != nil {
		return nil, fmt.Errorf("access: %w", err)
	}
	p, err := newForwarder(opts.Local, opts.Log)
	if err != nil {
		return nil, err
	}
	imp := &impersonators{
		cs: cs, namespace: opts.Namespace, tokenTTL: opts.TokenTTL, now: opts.Now,
		log: opts.Log, entries: map[string]*entry{}, metrics: newMetrics(),
	}
	if opts.Registerer != nil && opts.Direct {
		if err := imp.metrics.registerDirect(opts.Registerer); err != nil {
			return nil, fmt.Errorf("access: registering metrics: %w", err)
		}
	} else if opts.Registerer != nil {
		if err := imp.metrics.register(opts.Registerer, imp); err != nil {
			return nil, fmt.Errorf("access: registering metrics: %w", err)
		}
	}
	return &Handler{opts: opts, proxy: p, imp: imp}, nil
}

// newForwarder builds the UpgradeAwareHandler to the local kube-apiserver:
// TLS from local without its credentials, and the credentials round
// tripper as the last hop for plain and upgrade requests.
func newForwarder(local *rest.Config, log logr.Logger) (*proxy.UpgradeAwareHandler, error) {
	anon := rest.AnonymousClientConfig(local)
	loc, err := url.Parse(anon.Host)
	if err != nil || loc.Host == "" {
		// rest.Config.Host may be a bare host:port.
		loc, err = url.Parse("https://" + anon.Host)
		if err != nil {
			return nil, fmt.Errorf("access: local API server %q: %w", anon.Host, err)
		}
	}
	// UpgradeAwareHandler answers every GET with a redirect to "<path>/"
	// when its Location has no path (kubernetes#4958), and in-cluster
	// configs have none (https://10.96.0.1:443).
	if loc.Path == "" {
		loc.Path = "/"
	}
	tlsCfg, err := rest.TLSConfigFor(anon)
	if err != nil {
		return nil, fmt.Errorf("access: %w", err)
	}
	base := &http.Transport{
		TLSClientConfig:     tlsCfg,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	if tlsCfg == nil {
		base.ForceAttemptHTTP2 = false
	}
	// Upgrades (exec, attach, port-forward) speak HTTP/1.1 on a raw TLS
	// connection: their own TLS config, since base adds "h2" to the
	// NextProtos of the config it is given once it is first used, and the
	// API server would then answer the upgrade in HTTP/2.
	upgradeTLS := tlsCfg.Clone()
	if upgradeTLS != nil {
		upgradeTLS.NextProtos = []string{"http/1.1"}
	}
	upgradeBase := &http.Transport{TLSClientConfig: upgradeTLS, TLSHandshakeTimeout: 10 * time.Second}
	return &proxy.UpgradeAwareHandler{
		Location:           loc,
		Transport:          &credentials{next: base},
		UpgradeTransport:   proxy.NewUpgradeRequestRoundTripper(upgradeBase, &credentials{next: proxy.MirrorRequest}),
		UseRequestLocation: true,
		UseLocationHost:    true,
		AppendLocationPath: true,
		// Flush every write: watches and logs stream.
		FlushInterval:             -1,
		RejectForwardingRedirects: true,
		Responder:                 errorResponder{log: log},
	}, nil
}

// ServeHTTP serves one user request delivered by the tunnel. Its URL path
// is the Kubernetes API path (/api/..., /apis/...).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if name, ok := headers.Impersonation(r.Header); ok {
		writeStatus(w, r, apierrors.NewBadRequest(fmt.Sprintf(
			"impersonation headers (%s) are not accepted through the fleet proxy: use kubectl --as against the upstream cluster, which forwards the impersonated identity", name)))
		return
	}
	id, err := h.verify(r.Context(), r.Header.Get(assertion.HeaderName))
	if err != nil {
		h.opts.Log.V(1).Info("refused a request without a valid identity assertion", "reason", err.Error(), "path", r.URL.Path)
		writeStatus(w, r, apierrors.NewUnauthorized("no valid identity assertion for this cluster"))
		return
	}
	h.serveAs(w, r, id)
}

// verify checks an assertion, refreshing the keys once on an unknown kid.
// Only fleet-proxy sends assertions (through the tunnel), and each of its
// replicas signs with a key it made at start and published just before: a
// read of the keys too soon after the last one waits for the interval to
// pass rather than refuse the request, so the assertions of a replica that
// started moments after that read verify.
func (h *Handler) verify(ctx context.Context, token string) (assertion.Identity, error) {
	id, err := h.opts.Verifier.Verify(token, h.opts.Audience, h.opts.Now())
	if !errors.Is(err, assertion.ErrUnknownKey) || !h.refreshUnknownKey(ctx, true) {
		return id, err
	}
	return h.opts.Verifier.Verify(token, h.opts.Audience, h.opts.Now())
}

// refreshOnUnknownKey reads the signing keys again (at most every
// RefreshMinInterval) and reports whether it did.
func (h *Handler) refreshOnUnknownKey(ctx context.Context) bool {
	return h.refreshUnknownKey(ctx, false)
}

// refreshUnknownKey reads the signing keys again for an unknown kid and
// reports whether they were read since the caller asked. Reads are at least
// RefreshMinInterval apart: one asked too soon is skipped or, with wait,
// made once the interval has passed (bounded by ctx); callers that waited
// together share one read.
func (h *Handler) refreshUnknownKey(ctx context.Context, wait bool) bool {
	if h.opts.RefreshKeys == nil {
		return false
	}
	h.refreshMu.Lock()
	seen := h.refreshes
	if early := RefreshMinInterval - h.opts.Now().Sub(h.lastRefresh); early > 0 {
		h.refreshMu.Unlock()
		if !wait {
			return false
		}
		t := time.NewTimer(early)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		h.refreshMu.Lock()
		if h.refreshes != seen {
			h.refreshMu.Unlock()
			return true
		}
	}
	defer h.refreshMu.Unlock()
	h.lastRefresh = h.opts.Now()
	keys, err := h.opts.RefreshKeys(ctx)
	if err != nil {
		h.opts.Log.Error(err, "refreshing the signing keys")
		return false
	}
	h.refreshes++
	h.opts.Verifier.SetKeys(keys)
	if h.opts.KeysChanged != nil {
		h.opts.KeysChanged(keys)
	}
	return true
}

// Keys are the signing keys the Handler verifies with.
func (h *Handler) Keys() *assertion.KeySet { return h.opts.Verifier.Keys() }

// Run, until ctx ends, reads the signing keys at start and every
// KeysInterval (when RefreshKeys is set) and collects unused impersonators
// every GCInterval.
func (h *Handler) Run(ctx context.Context) error {
	gc := time.NewTicker(h.opts.GCInterval)
	defer gc.Stop()
	keys := time.NewTicker(h.opts.KeysInterval)
	defer keys.Stop()
	h.refreshKeys(ctx)
	for {
		if _, err := h.CollectGarbage(ctx); err != nil && ctx.Err() == nil {
			h.opts.Log.Error(err, "collecting unused impersonators")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-keys.C:
			h.refreshKeys(ctx)
			continue
		case <-gc.C:
		}
	}
}

// refreshKeys reads the signing keys now, if RefreshKeys is set.
func (h *Handler) refreshKeys(ctx context.Context) {
	if h.opts.RefreshKeys == nil {
		return
	}
	h.refreshMu.Lock()
	defer h.refreshMu.Unlock()
	keys, err := h.opts.RefreshKeys(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.opts.Log.Error(err, "refreshing the signing keys")
		}
		return
	}
	h.lastRefresh = h.opts.Now()
	h.refreshes++
	h.opts.Verifier.SetKeys(keys)
	if h.opts.KeysChanged != nil {
		h.opts.KeysChanged(keys)
	}
}

// CollectGarbage removes the impersonators unused for UnusedAfter and
// returns how many.
func (h *Handler) CollectGarbage(ctx context.Context) (int, error) {
	return h.imp.collect(ctx, h.opts.UnusedAfter)
}

// creds are what the last round tripper adds to a forwarded request.
type creds struct {
	token string
	id    Downstream
	// rejected is called when the API server does not accept the token
	// (401): the impersonator is made again for the next request.
	rejected func()
}

type credsKey struct{}

func withCredentials(ctx context.Context, c *creds) context.Context {
	return context.WithValue(ctx, credsKey{}, c)
}

// credentials is the last round tripper before the wire: it removes any
// credential and Impersonate-* header the request still carries and sets
// the impersonator's bearer token and the downstream identity. Without
// credentials in the context it fails (closed).
type credentials struct {
	next http.RoundTripper
}

func (rt *credentials) RoundTrip(req *http.Request) (*http.Response, error) {
	c, _ := req.Context().Value(credsKey{}).(*creds)
	if c == nil || c.token == "" || c.id.User == "" {
		return nil, errors.New("access: no impersonator credentials for the request")
	}
	req = req.Clone(req.Context())
	headers.DropIdentity(req.Header)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Impersonate-User", c.id.User)
	if c.id.UID != "" {
		req.Header.Set("Impersonate-Uid", c.id.UID)
	}
	for _, g := range c.id.Groups {
		req.Header.Add("Impersonate-Group", g)
	}
	for k, vs := range c.id.Extra {
		for _, v := range vs {
			req.Header.Add("Impersonate-Extra-"+url.PathEscape(k), v)
		}
	}
	resp, err := rt.next.RoundTrip(req)
	if err == nil && resp != nil && resp.StatusCode == http.StatusUnauthorized && c.rejected != nil {
		c.rejected()
	}
	return resp, err
}

// errorResponder answers proxy errors without details of the backend.
type errorResponder struct{ log logr.Logger }

func (e errorResponder) Error(w http.ResponseWriter, req *http.Request, err error) {
	// The error names addresses, never the credentials.
	e.log.Error(err, "could not reach the local API server", "path", req.URL.Path)
	writeStatus(w, req, apierrors.NewServiceUnavailable("the agent could not reach the cluster's API server"))
}

// writeStatus writes a metav1.Status as the API server would.
func writeStatus(w http.ResponseWriter, _ *http.Request, err *apierrors.StatusError) {
	st := err.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(&st)
}
