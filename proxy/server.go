// Package proxy is fleet-proxy, the upstream server of the aggregated API
// proxy.fleet.cattle.io/v1alpha1 (docs/design/cluster-access.md): the upstream API
// server forwards users' requests for
// /apis/proxy.fleet.cattle.io/v1alpha1/namespaces/<ws>/clusters/<name>/proxy/<path>
// to it; it believes the forwarded identity only from the aggregator's
// client certificate, asks the upstream API server whether that user may use
// fleet.cattle.io clusters/proxy on that Cluster, cleans the request of every
// credential and identity header, adds a signed assertion of who the user is
// and sends the request through the cluster's tunnel. It holds no
// downstream credential.
package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/tunnel"
)

// DialFunc dials the agent's handler over a cluster's tunnel.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Tunnels finds the tunnel of a connected cluster by its key
// "<workspace>/<cluster>". The tunnel server (another part) implements it.
type Tunnels interface {
	// Dialer returns a dial function over the cluster's tunnel, false when
	// the cluster holds no tunnel. The address dialed is always AgentAddress.
	Dialer(key string) (DialFunc, bool)
	// NotConnected says why the cluster holds no tunnel, for the 503 an
	// authorized user gets, and how many seconds a client should wait
	// before it tries again (0: no Retry-After).
	NotConnected(ctx context.Context, key string) (why string, retryAfter int)
}

// AgentAddress is the host:port requests to an agent are sent to over its
// tunnel: the one target the agent's tunnel client accepts
// (tunnel.AccessAddress, whose home is the tunnel package, which the agent
// links), mapped there to its access handler. It names no host.
const AgentAddress = tunnel.AccessAddress

// Asserter signs the identity assertion (header AssertionHeader) for one
// request to one cluster: audience "<workspace>/<cluster>".
type Asserter interface {
	Assert(u user.Info, audience string) (string, error)
}

// KeySet serves the public signing keys as a JWK Set.
type KeySet interface {
	JWKS() ([]byte, error)
}

// Attacher serves agents' tunnels: GET .../namespaces/<ws>/clusters/<name>/attach
// (a WebSocket upgrade) by the authenticated caller u. It must map u to its
// own Cluster from upstream objects and refuse any other key
// (docs/design/cluster-access.md, "Agents"). The tunnel server implements it.
type Attacher interface {
	ServeAttach(w http.ResponseWriter, r *http.Request, key string, u user.Info)
}

// AssertionHeader carries the signed identity assertion to the agent.
const AssertionHeader = assertion.HeaderName

// serverOptions configure a Server.
type serverOptions struct {
	// Client is the upstream clientset: it reads the
	// extension-apiserver-authentication ConfigMap and makes
	// SubjectAccessReviews.
	Client kubernetes.Interface
	// Tunnels finds clusters' tunnels.
	Tunnels Tunnels
	// Asserter signs identity assertions.
	Asserter Asserter
	// Keys are the public signing keys (nil: signingkeys answers 503).
	Keys KeySet
	// Attacher serves agents' tunnels (nil: attach answers 503).
	Attacher Attacher
	// Peer, when set, accepts the connections of the other replicas at
	// PeerPath (TunnelServer.Server.PeerHandler(): the peer token is its
	// only credential, without it 401).
	Peer http.Handler
	// Registerer gets the metrics (nil: controller-runtime's registry).
	Registerer prometheus.Registerer
	// AuthorizationCacheTTL is how long an allowed or denied answer is
	// kept (zero: 10 s).
	AuthorizationCacheTTL time.Duration
	// DirectIssuer signs direct tokens for the authorized cluster endpoint
	// and Registry records them (either nil: clusters/token answers 503).
	DirectIssuer DirectIssuer
	Registry     *Registry
	// Agents maps an agent's identity to its Cluster for
	// clusters/revocations (nil: 503).
	Agents AgentAuthorizer
	// DirectEndpoint, when set, gives a Cluster's direct endpoint (URL and
	// the CA its agent reported), returned with each token; an error
	// (wrapping ErrNoDirectEndpoint when it has none) refuses the token and
	// says what to set.
	DirectEndpoint func(ctx context.Context, ws, name string) (proxyv1.DirectEndpoint, error)
	// DirectTokenMaxLifetime bounds what a user may ask (zero: 24 h).
	DirectTokenMaxLifetime time.Duration
	// DirectTokenUnverifiedMaxLifetime bounds a token whose caller's
	// credential lifetime is unknown (none shown, or one without an
	// expiry; zero: DefaultDirectUnverifiedLifetime).
	DirectTokenUnverifiedMaxLifetime time.Duration
	// StreamRecheckInterval is how often the right of a request still
	// open (a watch, logs -f, exec, port-forward) is checked again; the
	// request is ended once it is gone (zero: 15 s).
	StreamRecheckInterval time.Duration
}

// webhookRetryBackoff is the API server's default for its authentication
// and authorization webhooks (options.DefaultAuthWebhookRetryBackoff, not
// imported: that package links the storage backends).
func webhookRetryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// Server is fleet-proxy's HTTPS handler.
type Server struct {
	opts    serverOptions
	authn   *requestHeaderAuth
	authz   authorizer.Authorizer
	metrics *metrics
	handler http.Handler
	// tokenAuthn and endpoint serve fleet-proxy's endpoint (endpoint.go).
	tokenAuthn authenticator.Request
	endpoint   http.Handler
	// transports are the pooled transports to the agents.
	transports agentTransports
}

// newServer makes fleet-proxy's HTTPS handler from its parts (New wires
// them as `fleet proxy` runs them). Start must run before it serves.
func newServer(opts serverOptions) (*Server, error) {
	if opts.Client == nil || opts.Tunnels == nil || opts.Asserter == nil {
		return nil, errors.New("proxy: Client, Tunnels and Asserter are required")
	}
	if opts.Registerer == nil {
		opts.Registerer = crmetrics.Registry
	}
	ttl := opts.AuthorizationCacheTTL
	if ttl == 0 {
		ttl = 10 * time.Second
	}
	if opts.DirectTokenMaxLifetime <= 0 || opts.DirectTokenMaxLifetime > assertion.MaxDirectLifetime {
		opts.DirectTokenMaxLifetime = assertion.MaxDirectLifetime
	}
	if opts.DirectTokenUnverifiedMaxLifetime <= 0 {
		opts.DirectTokenUnverifiedMaxLifetime = DefaultDirectUnverifiedLifetime
	}
	opts.DirectTokenUnverifiedMaxLifetime = min(opts.DirectTokenUnverifiedMaxLifetime, opts.DirectTokenMaxLifetime)
	if opts.StreamRecheckInterval == 0 {
		opts.StreamRecheckInterval = 15 * time.Second
	}
	authn, err := newRequestHeaderAuth(opts.Client)
	if err != nil {
		return nil, err
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: opts.Client.AuthorizationV1(),
		AllowCacheTTL:             ttl,
		DenyCacheTTL:              ttl,
		WebhookRetryBackoff:       webhookRetryBackoff(),
	}.New()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	tokenAuthn, err := newTokenAuth(opts.Client, ttl)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, authn: authn, authz: authz, metrics: m, tokenAuthn: tokenAuthn}
	s.endpoint = s.endpointHandler()
	mux := http.NewServeMux()
	probes(mux)
	if opts.Peer != nil {
		mux.Handle("GET "+PeerPath, opts.Peer)
	}
	api := http.NewServeMux()
	s.discovery(api)
	api.HandleFunc(prefix+"/namespaces/{ws}/clusters/{name}/proxy", s.clusterProxy)
	api.HandleFunc(prefix+"/namespaces/{ws}/clusters/{name}/proxy/{path...}", s.clusterProxy)
	api.HandleFunc("GET "+prefix+"/signingkeys", s.signingKeys)
	api.HandleFunc("GET "+prefix+"/namespaces/{ws}/clusters/{name}/attach", s.attach)
	api.HandleFunc("POST "+prefix+"/namespaces/{ws}/clusters/{name}/token", s.directToken)
	api.HandleFunc("GET "+prefix+"/namespaces/{ws}/clusters/{name}/revocations", s.revocations)
	api.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, apierrors.NewGenericServerResponse(http.StatusNotFound, r.Method, clustersResource, "",
			fmt.Sprintf("fleet-proxy serves no %s %s", r.Method, r.URL.Path), 0, false))
	})
	mux.Handle("/", s.authenticated(api))
	s.handler = mux
	return s, nil
}

// Start reads the requestheader settings (an error when it cannot) and keeps
// them current until ctx ends.
func (s *Server) Start(ctx context.Context) error { return s.authn.start(ctx) }

// RunDirectRecheck rechecks the holders of live direct tokens every
// interval (zero: 10 s) until ctx ends (Registry.RunRecheck).
func (s *Server) RunDirectRecheck(ctx context.Context, interval time.Duration) {
	if s.opts.Registry == nil {
		return
	}
	if interval <= 0 {
		interval = 10 * time.Second
	}
	s.opts.Registry.RunRecheck(ctx, s.authz, interval, func(n int) { s.metrics.directRevoked.Add(float64(n)) })
}

// TLSConfig is the listener's TLS configuration for a serving certificate:
// it asks for a client certificate, which the requestheader authenticator
// verifies itself against the current requestheader CA.
func TLSConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequestClientCert,
		MinVersion:   tls.VersionTLS12,
	}
}

// Serve serves on l (a TLS listener made with TLSConfig) until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	return serve(ctx, l, s.handler)
}

// ServeEndpoint serves fleet-proxy's endpoint on l (a TLS listener made
// with EndpointTLSConfig) until ctx ends.
func (s *Server) ServeEndpoint(ctx context.Context, l net.Listener) error {
	return serve(ctx, l, s.endpoint)
}

func serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	_ = srv.Close()
	return nil
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }

type userKey struct{}

// authenticated lets through only requests the requestheader authenticator
// accepts; everything else gets 401.
func (s *Server) authenticated(next http.Handler) http.Handler {
	return s.authenticatedBy(s.authn, "fleet-proxy serves only requests forwarded by the upstream API server (with its front-proxy client certificate); send them to the upstream API server", next)
}

// authenticatedBy lets through the requests authn accepts, with their user
// in the context; the others get 401 with refusal.
func (s *Server) authenticatedBy(authn authenticator.Request, refusal string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				log.FromContext(r.Context()).V(1).Info("request refused: not authenticated", "path", r.URL.Path, "reason", err.Error())
			}
			s.metrics.refused("unauthenticated")
			writeStatus(w, apierrors.NewUnauthorized(refusal))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, resp.User)))
	})
}

// probes serves the health endpoints every listener answers.
func probes(mux *http.ServeMux) {
	for _, p := range []string{"/healthz", "/readyz", "/livez"} {
		mux.HandleFunc("GET "+p, ok)
	}
}

func userFrom(ctx context.Context) user.Info {
	u, _ := ctx.Value(userKey{}).(user.Info)
	return u
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.Status()
	st.Kind, st.APIVersion = "Status", "v1"
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	writeJSON(w, int(st.Code), st)
}

func (s *Server) signingKeys(w http.ResponseWriter, r *http.Request) {
	if s.opts.Keys == nil {
		writeStatus(w, apierrors.NewServiceUnavailable("fleet-proxy has no signing keys yet"))
		return
	}
	b, err := s.opts.Keys.JWKS()
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("reading the signing keys: %w", err)))
		return
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	_, _ = w.Write(b)
}

func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	if s.opts.Attacher == nil {
		writeStatus(w, apierrors.NewServiceUnavailable("this fleet-proxy serves no cluster tunnels"))
		return
	}
	s.opts.Attacher.ServeAttach(w, r, r.PathValue("ws")+"/"+r.PathValue("name"), userFrom(r.Context()))
}
