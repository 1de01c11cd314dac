package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/headers"
	"github.com/gitops-fleet/fleet/internal/tunnel"
)

// The right a user needs on a Cluster (SPEC §5).
const (
	rightGroup       = "fleet.cattle.io"
	rightVersion     = "v1alpha1"
	rightResource    = "clusters"
	rightSubresource = "proxy"
)

func (s *Server) clusterProxy(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ws, name := r.PathValue("ws"), r.PathValue("name")
	if len(validation.IsDNS1123Label(ws)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		s.metrics.refused("not-found")
		writeStatus(w, apierrors.NewNotFound(clustersResource, ws+"/"+name))
		return
	}
	key := ws + "/" + name
	u := userFrom(r.Context())
	inner, err := innerURL(r, ws, name)
	if err != nil {
		s.metrics.refused("bad-path")
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	// exec, attach and port-forward (any upgrade) need create, whatever
	// the method: a WebSocket exec is a GET.
	verb, ok := assertion.RequestVerb(r.Method, r.Header, inner.Path)
	if !ok {
		s.metrics.refused("method")
		writeStatus(w, apierrors.NewMethodNotSupported(clustersResource, r.Method))
		return
	}
	right := authorizer.AttributesRecord{
		User:            u,
		Verb:            verb,
		Namespace:       ws,
		APIGroup:        rightGroup,
		APIVersion:      rightVersion,
		Resource:        rightResource,
		Subresource:     rightSubresource,
		Name:            name,
		ResourceRequest: true,
	}
	decision, reason, aerr := s.authz.Authorize(r.Context(), right)
	if decision != authorizer.DecisionAllow {
		msg := fmt.Sprintf("user %q cannot %s %s %s/%s on Cluster %s: access to a cluster through fleet-proxy needs that right (ClusterRole fleet-cluster-proxy)",
			u.GetName(), verb, rightGroup, rightResource, rightSubresource, key)
		if verb == "create" && r.Method != http.MethodPost {
			msg += " (exec, attach and port-forward need create, whatever the method)"
		}
		if aerr != nil {
			log.FromContext(r.Context()).Error(aerr, "authorizing a cluster proxy request", "cluster", key, "user", u.GetName())
			msg += "; the authorization check failed: " + aerr.Error()
		} else if reason != "" {
			msg += ": " + reason
		}
		s.metrics.refused("forbidden")
		writeStatus(w, apierrors.NewForbidden(clustersProxyResource, name, errors.New(msg)))
		return
	}

	// Only an authorized user learns whether the cluster is connected.
	dial, ok := s.opts.Tunnels.Dialer(key)
	if !ok {
		s.transports.forget(key)
		s.metrics.done(key, http.StatusServiceUnavailable, start, 0)
		why, retry := s.opts.Tunnels.NotConnected(r.Context(), key)
		st := apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %s is not connected: %s", key, why))
		if retry > 0 {
			st.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(retry)}
		}
		writeStatus(w, st)
		return
	}
	assertion, err := s.opts.Asserter.Assert(u, key)
	if err != nil {
		s.metrics.done(key, http.StatusInternalServerError, start, 0)
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("signing the identity assertion for cluster %s: %w", key, err)))
		return
	}

	// The request ends when its right goes, even while it streams.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	conns := &connSet{}
	stop := s.whileAllowed(ctx, right, key, func() {
		cancel()
		conns.closeAll() // an upgraded stream no longer follows ctx
	})
	defer stop()

	out := r.Clone(ctx)
	headers.Clean(out.Header, httpstream.IsUpgradeRequest(r))
	out.Header.Set(AssertionHeader, assertion)
	out.URL.Path, out.URL.RawPath = inner.Path, inner.RawPath

	// An upgrade (exec, attach, port-forward) dials a stream of its own,
	// closed when the right goes; a plain request reuses an idle stream of
	// the cluster's tunnel (agentTransports) and ends with its context.
	upgrade := &http.Transport{
		DialContext:           conns.track(dial),
		DisableKeepAlives:     true,
		ExpectContinueTimeout: time.Second,
	}
	defer upgrade.CloseIdleConnections()
	// The query goes in the location too: an upgrade (exec's command and
	// streams) is dialed to the location as it is, without the request's.
	loc := &url.URL{Scheme: "http", Host: AgentAddress, Path: inner.Path, RawPath: inner.RawPath, RawQuery: r.URL.RawQuery}
	h := proxy.NewUpgradeAwareHandler(loc, lastHop{s.transports.get(key, s.opts.Tunnels)}, false, false, responder{key: key})
	h.UseLocationHost = true
	h.UpgradeTransport = lastHop{upgrade}
	// Watches and logs stream: flush every write.
	h.FlushInterval = -1
	h.RejectForwardingRedirects = true
	rec := newRecorder(w)
	h.ServeHTTP(rec, out)
	s.metrics.done(key, rec.code(), start, rec.bytes)
}

// innerURL is the path after .../clusters/<name>/proxy, escaped as the user
// sent it, "/" when empty.
func innerURL(r *http.Request, ws, name string) (*url.URL, error) {
	p := prefix + "/namespaces/" + ws + "/clusters/" + name + "/proxy"
	escaped := r.URL.EscapedPath()
	if !strings.HasPrefix(escaped, p) {
		return nil, fmt.Errorf("cannot read the cluster path of %q", escaped)
	}
	rest := strings.TrimPrefix(escaped, p)
	if rest == "" {
		rest = "/"
	}
	if !strings.HasPrefix(rest, "/") {
		return nil, fmt.Errorf("cannot read the cluster path of %q", escaped)
	}
	u, err := url.Parse(rest)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return nil, fmt.Errorf("cannot read the cluster path of %q", escaped)
	}
	return u, nil
}

// lastHop is the transport to the agent. The reverse proxy inside
// UpgradeAwareHandler adds X-Forwarded-For (with fleet-proxy's peer, the
// aggregator) on both its paths; lastHop removes it (headers.DropIdentity)
// again as the request leaves, for plain requests (RoundTrip) and upgrades (WrapRequest,
// then a dial through the wrapped transport).
type lastHop struct{ t *http.Transport }

func (l lastHop) RoundTrip(r *http.Request) (*http.Response, error) {
	r, _ = l.WrapRequest(r)
	return l.t.RoundTrip(r)
}

func (l lastHop) WrappedRoundTripper() http.RoundTripper { return l.t }

func (l lastHop) WrapRequest(r *http.Request) (*http.Request, error) {
	r = r.Clone(r.Context())
	headers.DropIdentity(r.Header)
	return r, nil
}

var (
	_ proxy.UpgradeRequestRoundTripper = lastHop{}
	_ utilnet.RoundTripperWrapper      = lastHop{}
)

// responder answers when the agent cannot be reached.
type responder struct{ key string }

func (e responder) Error(w http.ResponseWriter, r *http.Request, err error) {
	log.FromContext(r.Context()).V(1).Info("cluster proxy request failed", "cluster", e.key, "reason", err.Error())
	st := apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %s: the request did not reach the agent: %v", e.key, err))
	st.ErrStatus.Code = http.StatusBadGateway
	writeStatus(w, st)
}

// whileAllowed checks right again every StreamRecheckInterval while ctx
// lasts (the authorizer's cache bounds how stale an answer is) and calls
// revoke once it is denied. A check that fails keeps the request: the next
// one decides. The returned func stops the checks. Nothing runs for a
// request that ends before the first check.
func (s *Server) whileAllowed(ctx context.Context, right authorizer.AttributesRecord, key string, revoke func()) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock() // the callback resets t: not before it is set
	defer mu.Unlock()
	t = time.AfterFunc(s.opts.StreamRecheckInterval, func() {
		decision, _, err := s.authz.Authorize(ctx, right)
		if ctx.Err() != nil {
			return
		}
		if decision == authorizer.DecisionAllow || err != nil {
			mu.Lock()
			if !stopped {
				t.Reset(s.opts.StreamRecheckInterval)
			}
			mu.Unlock()
			return
		}
		log.FromContext(ctx).Info("ending an open request: the user no longer has clusters/proxy on the cluster",
			"cluster", key, "user", right.User.GetName(), "verb", right.Verb)
		s.metrics.refused("revoked")
		revoke()
	})
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// connSet holds the connections a request dialed to the agent, so that a
// revoked upgraded stream (exec, port-forward), which no longer follows
// the request's context, can be closed.
type connSet struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func (c *connSet) track(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed {
			_ = conn.Close()
			return nil, errors.New("the request's access was revoked")
		}
		c.conns = append(c.conns, conn)
		return conn, nil
	}
}

func (c *connSet) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

// agentTransports keeps one pooled transport per cluster for plain
// requests, so a request reuses an idle stream of its cluster's tunnel
// instead of opening one. Nothing of a user stays with a stream: each
// request carries its own signed assertion, which the agent checks.
type agentTransports struct {
	mu sync.Mutex
	m  map[string]*http.Transport
}

// idleAgentStreams bounds the idle streams kept per cluster; they close
// after idleAgentStreamTimeout unused.
const (
	idleAgentStreams       = 16
	idleAgentStreamTimeout = 90 * time.Second
)

// get is cluster key's transport, made on first use; it dials over the
// tunnel that holds key at the time of each dial.
func (a *agentTransports) get(key string, tunnels Tunnels) *http.Transport {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.m[key]; t != nil {
		return t
	}
	if a.m == nil {
		a.m = map[string]*http.Transport{}
	}
	t := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dial, ok := tunnels.Dialer(key)
			if !ok {
				return nil, tunnel.ErrNoSession
			}
			return dial(ctx, network, addr)
		},
		MaxIdleConnsPerHost:   idleAgentStreams,
		IdleConnTimeout:       idleAgentStreamTimeout,
		ExpectContinueTimeout: time.Second,
	}
	a.m[key] = t
	return t
}

// forget drops cluster key's transport: its tunnel is gone.
func (a *agentTransports) forget(key string) {
	a.mu.Lock()
	t := a.m[key]
	delete(a.m, key)
	a.mu.Unlock()
	if t != nil {
		t.CloseIdleConnections()
	}
}
