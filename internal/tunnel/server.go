// Package tunnel is the reverse tunnel between fleet-proxy (upstream) and
// the agents (docs/cluster-access.md), on github.com/rancher/remotedialer:
// an agent opens a WebSocket to fleet-proxy through the upstream API server
// (.../clusters/<name>/attach) and fleet-proxy sends HTTP requests back over
// it, to the one handler the agent serves in process.
//
// The session key is the Cluster "<workspace>/<name>" that the Server's
// Authenticate derives from the caller's identity (see ClusterForIdentity);
// nothing the agent sends chooses it. The agent's side (Client) allows
// exactly one target, AccessAddress, and never dials anything else.
package tunnel

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rancher/remotedialer"
	rdmetrics "github.com/rancher/remotedialer/metrics"
)

// The one target an agent serves through its tunnel: a pseudo address that
// the agent maps to its in-process handler. It names no host.
const (
	AccessNetwork = "tcp"
	AccessAddress = "agent-access:443"
)

// ErrNoSession is returned when no agent holds a tunnel for a cluster.
var ErrNoSession = errors.New("the cluster's agent is not connected")

// Server is the upstream side: it accepts agents' tunnels (ServeHTTP, to be
// mounted at the attach subresource) and gives a RoundTripper per Cluster.
type Server struct {
	// Authenticate names the Cluster ("<workspace>/<name>") whose tunnel
	// the request may hold, or refuses it with an error (which is logged
	// and answered as 403 without details: it may name identities). It
	// must not trust anything the agent sends but its authenticated
	// identity.
	Authenticate func(*http.Request) (clusterKey string, err error)
	// OnConnect and OnDisconnect, when set, are called (synchronously,
	// keep them short) when an agent's session for key starts and ends;
	// sessions is how many the key has afterwards (one per agent replica).
	OnConnect    func(key string, sessions int)
	OnDisconnect func(key string, sessions int)
	Log          logr.Logger

	rd *remotedialer.Server

	mu         sync.Mutex
	sessions   map[string]int
	transports map[string]*http.Transport

	tunnelsUp     prometheus.Gauge
	sessionsUp    prometheus.Gauge
	refused       prometheus.Counter
	transportsNow prometheus.GaugeFunc
}

type keyContext struct{}

// NewServer makes a Server. reg, when not nil, gets the tunnel metrics and
// remotedialer's own (which can be registered on one registry per process
// only: remotedialer keeps them in package variables).
func NewServer(authenticate func(*http.Request) (string, error), reg prometheus.Registerer) *Server {
	s := &Server{
		Authenticate: authenticate,
		Log:          logr.Discard(),
		sessions:     map[string]int{},
		transports:   map[string]*http.Transport{},
		tunnelsUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleet_proxy_tunnels_connected",
			Help: "Clusters with at least one agent tunnel connected to this fleet-proxy replica.",
		}),
		sessionsUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleet_proxy_tunnel_sessions",
			Help: "Agent tunnel sessions connected to this fleet-proxy replica (one per agent replica).",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_proxy_tunnel_refused_total",
			Help: "Tunnel attach requests refused because the caller may hold no tunnel or not the one named.",
		}),
	}
	// The key was put into the request's context by ServeHTTP after
	// Authenticate: remotedialer's own authorizer only reads it back.
	s.rd = remotedialer.New(func(req *http.Request) (string, bool, error) {
		key, ok := req.Context().Value(keyContext{}).(string)
		return key, ok && key != "", nil
	}, func(rw http.ResponseWriter, _ *http.Request, code int, err error) {
		s.Log.V(1).Info("tunnel request failed", "code", code, "error", err.Error())
		http.Error(rw, http.StatusText(code), code)
	})
	// The server side never serves connects from agents.
	s.rd.ClientConnectAuthorizer = func(string, string) bool { return false }
	if reg != nil {
		reg.MustRegister(s.tunnelsUp, s.sessionsUp, s.refused)
		rdmetrics.MustRegister(reg)
	}
	return s
}

// ServeHTTP accepts an agent's tunnel: the WebSocket upgrade of an attach
// request. It returns when the tunnel ends.
func (s *Server) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	key, err := s.Authenticate(req)
	if err != nil || key == "" {
		s.refused.Inc()
		s.Log.Info("refused a tunnel", "path", req.URL.Path, "reason", errString(err))
		http.Error(rw, "this identity may not hold the tunnel of this cluster", http.StatusForbidden)
		return
	}
	hw := &hijackWatch{ResponseWriter: rw, onHijack: func() { s.connected(key) }}
	s.rd.ServeHTTP(hw, req.WithContext(context.WithValue(req.Context(), keyContext{}, key)))
	if hw.hijacked {
		s.disconnected(key)
	}
}

func errString(err error) string {
	if err == nil {
		return "no cluster"
	}
	return err.Error()
}

func (s *Server) connected(key string) {
	s.mu.Lock()
	s.sessions[key]++
	n := s.sessions[key]
	if n == 1 {
		s.tunnelsUp.Inc()
	}
	s.sessionsUp.Inc()
	s.mu.Unlock()
	s.Log.Info("agent tunnel connected", "cluster", key, "sessions", n)
	if s.OnConnect != nil {
		s.OnConnect(key, n)
	}
}

func (s *Server) disconnected(key string) {
	s.mu.Lock()
	s.sessions[key]--
	n := s.sessions[key]
	s.sessionsUp.Dec()
	t := s.transports[key]
	if n <= 0 {
		delete(s.sessions, key)
		delete(s.transports, key)
		s.tunnelsUp.Dec()
	}
	s.mu.Unlock()
	// Idle connections may run over the session that went: new requests
	// dial through the next one (remotedialer uses a key's first session).
	if t != nil {
		t.CloseIdleConnections()
	}
	s.Log.Info("agent tunnel disconnected", "cluster", key, "sessions", n)
	if s.OnDisconnect != nil {
		s.OnDisconnect(key, n)
	}
}

// HasSession reports whether an agent of the cluster holds a tunnel to this
// replica.
func (s *Server) HasSession(key string) bool {
	return s.rd.HasSession(key)
}

// Sessions is how many agent sessions the cluster has on this replica.
func (s *Server) Sessions(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[key]
}

// Dial opens a stream to address through the cluster's tunnel. The agent
// refuses every address but AccessAddress; since remotedialer does not wait
// for the agent's answer, a refusal shows as an error on the first read.
func (s *Server) Dial(ctx context.Context, key, network, address string) (net.Conn, error) {
	if !s.rd.HasSession(key) {
		return nil, ErrNoSession
	}
	return s.rd.Dialer(key)(ctx, network, address)
}

// RoundTripper returns the transport that sends HTTP requests to the
// agent's handler through the cluster's tunnel, and false when the cluster
// has no session. Whatever host a request names, it goes to AccessAddress
// over HTTP/1.1 (the tunnel carries the TLS); the transport is kept while
// the cluster has a session and dropped when its last one goes.
func (s *Server) RoundTripper(key string) (http.RoundTripper, bool) {
	if !s.rd.HasSession(key) {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.transports[key]; ok {
		return t, true
	}
	dial := s.rd.Dialer(key)
	t := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx, AccessNetwork, AccessAddress)
		},
		// HTTP/1.1 only: no TLS inside the tunnel, no HTTP/2 upgrade.
		ForceAttemptHTTP2:     false,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // watches and logs -f stream
		Proxy:                 nil,
	}
	s.transports[key] = t
	return t, true
}

// hijackWatch tells when remotedialer took the connection over: the
// WebSocket upgrade succeeded and the session is registered right after.
type hijackWatch struct {
	http.ResponseWriter
	onHijack func()
	hijacked bool
}

func (w *hijackWatch) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
		w.onHijack()
	}
	return c, rw, err
}

func (w *hijackWatch) Unwrap() http.ResponseWriter { return w.ResponseWriter }
