// Package tunnel is the reverse tunnel between fleet-proxy (upstream) and
// the agents (docs/design/cluster-access.md), on github.com/rancher/remotedialer:
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
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
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
	authenticate func(*http.Request) (clusterKey string, err error)
	observer     Observer
	log          logr.Logger

	rd *remotedialer.Server

	mu         sync.Mutex
	sessions   map[string]int
	attached   map[*attachedSession]struct{}
	transports map[string]*http.Transport
	peers      map[string]string

	tunnelsUp     prometheus.Gauge
	sessionsUp    prometheus.Gauge
	connects      prometheus.Counter
	disconnects   prometheus.Counter
	refused       prometheus.Counter
	revoked       prometheus.Counter
	transportsNow prometheus.GaugeFunc
}

// attachedSession is one agent's session on this replica: the attach
// request Authenticate allowed (kept to ask it again, see Recheck) and the
// connection remotedialer took over (closed to end the session).
type attachedSession struct {
	key  string
	req  *http.Request
	conn net.Conn
}

type keyContext struct{}

// sessionKey is remotedialer's client key of Cluster key "<ws>/<name>":
// "<ws>:<name>". remotedialer's peers announce clients as "<key>/<n>" and
// split at the first "/", so a key must not contain one; Kubernetes names
// never contain ":".
func sessionKey(key string) string {
	return strings.Replace(key, "/", ":", 1)
}

// Observer is told when an agent's session for a Cluster key starts and
// ends; sessions is how many the key has on this replica afterwards (one per
// agent replica). It is called synchronously: keep it short. Connected runs
// when the WebSocket upgrade takes the connection, just before remotedialer
// registers the session: HasSession may still be false inside it.
type Observer interface {
	Connected(key string, sessions int)
	Disconnected(key string, sessions int)
}

// ServerOptions configure NewServer.
type ServerOptions struct {
	// Authenticate names the Cluster ("<workspace>/<name>") whose tunnel
	// the request may hold, or refuses it with an error (which is logged
	// and answered as 403 without details: it may name identities). It
	// must not trust anything the agent sends but its authenticated
	// identity. Required.
	Authenticate func(*http.Request) (clusterKey string, err error)
	// Observer, when set, is told of sessions starting and ending.
	Observer Observer
	// Registerer, when set, gets the tunnel metrics and remotedialer's own
	// (which can be registered on one registry per process only:
	// remotedialer keeps them in package variables).
	Registerer prometheus.Registerer
	// Log (zero: discarded).
	Log logr.Logger
}

// NewServer makes a Server.
func NewServer(o ServerOptions) (*Server, error) {
	if o.Authenticate == nil {
		return nil, errors.New("tunnel: a server needs Authenticate")
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	reg := o.Registerer
	s := &Server{
		authenticate: o.Authenticate,
		observer:     o.Observer,
		log:          o.Log,
		sessions:     map[string]int{},
		attached:     map[*attachedSession]struct{}{},
		transports:   map[string]*http.Transport{},
		tunnelsUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleet_proxy_tunnels",
			Help: "Clusters with at least one agent tunnel held by this fleet-proxy replica.",
		}),
		connects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_proxy_tunnel_connects_total",
			Help: "Agent tunnel sessions that connected to this fleet-proxy replica.",
		}),
		disconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_proxy_tunnel_disconnects_total",
			Help: "Agent tunnel sessions that ended on this fleet-proxy replica.",
		}),
		sessionsUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleet_proxy_tunnel_sessions",
			Help: "Agent tunnel sessions connected to this fleet-proxy replica (one per agent replica).",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_proxy_tunnel_refused_total",
			Help: "Tunnel attach requests refused because the caller may hold no tunnel or not the one named.",
		}),
		revoked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_proxy_tunnel_revoked_total",
			Help: "Open agent tunnel sessions closed because their identity may no longer hold them.",
		}),
	}
	// The key was put into the request's context by ServeHTTP after
	// Authenticate: remotedialer's own authorizer only reads it back.
	s.rd = remotedialer.New(func(req *http.Request) (string, bool, error) {
		key, ok := req.Context().Value(keyContext{}).(string)
		return sessionKey(key), ok && key != "", nil
	}, func(rw http.ResponseWriter, _ *http.Request, code int, err error) {
		s.log.V(1).Info("tunnel request failed", "code", code, "error", err.Error())
		http.Error(rw, http.StatusText(code), code)
	})
	// The server side never serves connects from agents.
	s.rd.ClientConnectAuthorizer = func(string, string) bool { return false }
	if reg != nil {
		reg.MustRegister(s.tunnelsUp, s.sessionsUp, s.connects, s.disconnects, s.refused, s.revoked)
		// remotedialer keeps its metrics, and whether they are on, in
		// package variables that its sessions read: they are registered
		// once per process, on the first registry given (a second
		// registration would race those reads and panic on a registry
		// that has them).
		rdMetricsOnce.Do(func() { rdmetrics.MustRegister(reg) })
	}
	return s, nil
}

var rdMetricsOnce sync.Once

// ServeHTTP accepts an agent's tunnel: the WebSocket upgrade of an attach
// request. It returns when the tunnel ends.
func (s *Server) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	// Peers connect at PeerHandler only: the attach path is reachable
	// through the API server, so the peer headers are never looked at here.
	req.Header.Del(remotedialer.ID)
	req.Header.Del(remotedialer.Token)
	key, err := s.authenticate(req)
	if err != nil || key == "" {
		s.refused.Inc()
		s.log.Info("refused a tunnel", "path", req.URL.Path, "reason", errString(err))
		http.Error(rw, "this identity may not hold the tunnel of this cluster", http.StatusForbidden)
		return
	}
	sess := &attachedSession{key: key, req: req}
	hw := &hijackWatch{ResponseWriter: rw, onHijack: func(c net.Conn) { sess.conn = c; s.connected(sess) }}
	s.rd.ServeHTTP(hw, req.WithContext(context.WithValue(req.Context(), keyContext{}, key)))
	if hw.hijacked {
		s.disconnected(sess)
	}
}

func errString(err error) string {
	if err == nil {
		return "no cluster"
	}
	return err.Error()
}

func (s *Server) connected(sess *attachedSession) {
	key := sess.key
	s.mu.Lock()
	s.attached[sess] = struct{}{}
	s.sessions[key]++
	n := s.sessions[key]
	if n == 1 {
		s.tunnelsUp.Inc()
	}
	s.sessionsUp.Inc()
	s.connects.Inc()
	s.mu.Unlock()
	s.log.Info("agent tunnel connected", "cluster", key, "sessions", n)
	if s.observer != nil {
		s.observer.Connected(key, n)
	}
}

func (s *Server) disconnected(sess *attachedSession) {
	key := sess.key
	s.mu.Lock()
	delete(s.attached, sess)
	s.sessions[key]--
	n := s.sessions[key]
	s.sessionsUp.Dec()
	s.disconnects.Inc()
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
	s.log.Info("agent tunnel disconnected", "cluster", key, "sessions", n)
	if s.observer != nil {
		s.observer.Disconnected(key, n)
	}
}

// EnablePeering makes this replica one of a set of fleet-proxy replicas
// that reach each other's agents: id names this replica (its pod name),
// token is the shared peer token (from a Secret, not a pod token; at least
// 32 bytes), tlsConfig verifies the peers' serving certificate when this
// replica dials them (their pod IPs, so ServerName must be set: the name
// in the shared serving certificate). Call it once, before SetPeers.
func (s *Server) EnablePeering(id, token string, tlsConfig *tls.Config) error {
	if id == "" || len(token) < 32 || tlsConfig == nil {
		return errors.New("peering needs this replica's id, a peer token of at least 32 bytes and a TLS configuration that verifies peers")
	}
	s.rd.PeerID, s.rd.PeerToken, s.rd.PeerTLSConfig = id, token, tlsConfig
	return nil
}

// SetPeers sets the other replicas, id → WebSocket URL of their
// PeerHandler (wss://<pod IP>:<port><path>): new ones are dialed, gone ones
// dropped. A request for a cluster whose agent is connected to a peer is
// sent through that peer.
func (s *Server) SetPeers(peers map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.peers == nil {
		s.peers = map[string]string{}
	}
	for id := range s.peers {
		if _, ok := peers[id]; !ok {
			s.rd.RemovePeer(id)
			delete(s.peers, id)
		}
	}
	for id, url := range peers {
		if id == s.rd.PeerID || s.peers[id] == url {
			continue
		}
		s.rd.AddPeer(url, id, s.rd.PeerToken)
		s.peers[id] = url
	}
}

// PeerHandler accepts the connections of peer replicas (mount it on a path
// the API server does not proxy: only pods reach it). A caller that is not
// a configured peer with the peer token gets 401.
func (s *Server) PeerHandler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		id, token := req.Header.Get(remotedialer.ID), req.Header.Get(remotedialer.Token)
		s.mu.Lock()
		_, known := s.peers[id]
		s.mu.Unlock()
		if s.rd.PeerToken == "" || !known || subtle.ConstantTimeCompare([]byte(token), []byte(s.rd.PeerToken)) != 1 {
			s.refused.Inc()
			s.log.Info("refused a peer connection", "peer", id)
			http.Error(rw, http.StatusText(http.StatusUnauthorized), http.StatusUnauthorized)
			return
		}
		// remotedialer checks the headers again and registers the peer's
		// session; the context holds no cluster key.
		s.rd.ServeHTTP(rw, req)
	})
}

// HasSession reports whether an agent of the cluster holds a tunnel to this
// replica or to a peer.
func (s *Server) HasSession(key string) bool {
	return s.rd.HasSession(sessionKey(key))
}

// Held reports whether the cluster's tunnel is held anywhere: an agent
// session on this replica (counted from Observer.Connected on, before remotedialer
// registers it) or, with peering, one a peer announced.
func (s *Server) Held(key string) bool {
	return s.Sessions(key) > 0 || s.rd.HasSession(sessionKey(key))
}

// Recheck asks Authenticate again, with the attach request that opened it,
// whether each session on this replica may still be held, and closes those
// it refuses (ErrNotAnAgent, or another Cluster): the agent's registration
// or request ServiceAccount went, or its Cluster did or moved. A session
// whose check fails otherwise (reading an object) is kept until the next
// check. It returns how many sessions it closed.
func (s *Server) Recheck() int {
	s.mu.Lock()
	sessions := make([]*attachedSession, 0, len(s.attached))
	for sess := range s.attached {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	closed := 0
	for _, sess := range sessions {
		// The request's context ends with the session; its values (who
		// attached) are what the check needs.
		req := sess.req.WithContext(context.WithoutCancel(sess.req.Context()))
		key, err := s.authenticate(req)
		switch {
		case err == nil && key == sess.key:
			continue
		case err != nil && !errors.Is(err, ErrNotAnAgent):
			s.log.Error(err, "could not recheck an agent tunnel, kept until the next check", "cluster", sess.key)
			continue
		}
		reason := errString(err)
		if err == nil {
			reason = "the identity now maps to Cluster " + key
		}
		s.log.Info("closing an agent tunnel: its identity may no longer hold it", "cluster", sess.key, "reason", reason)
		s.revoked.Inc()
		_ = sess.conn.Close()
		closed++
	}
	return closed
}

// RecheckLoop runs Recheck on every receive from changed (the objects
// Authenticate reads changed; bursts are coalesced, at most one check per
// second) and every period, until ctx ends.
func (s *Server) RecheckLoop(ctx context.Context, period time.Duration, changed <-chan struct{}) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-changed:
			// Let the rest of a burst (a deletion cascades) arrive.
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		s.Recheck()
	}
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
	if !s.rd.HasSession(sessionKey(key)) {
		return nil, ErrNoSession
	}
	return s.rd.Dialer(sessionKey(key))(ctx, network, address)
}

// RoundTripper returns the transport that sends HTTP requests to the
// agent's handler through the cluster's tunnel, and false when the cluster
// has no session. Whatever host a request names, it goes to AccessAddress
// over HTTP/1.1 (the tunnel carries the TLS); the transport is kept while
// the cluster has a session and dropped when its last one goes.
func (s *Server) RoundTripper(key string) (http.RoundTripper, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.rd.HasSession(sessionKey(key)) {
		// A key served through a peer has no local disconnect to drop
		// its transport at: drop it here.
		if t, ok := s.transports[key]; ok {
			t.CloseIdleConnections()
			delete(s.transports, key)
		}
		return nil, false
	}
	if t, ok := s.transports[key]; ok {
		return t, true
	}
	dial := s.rd.Dialer(sessionKey(key))
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
	onHijack func(net.Conn)
	hijacked bool
}

func (w *hijackWatch) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
		w.onHijack(c)
	}
	return c, rw, err
}

func (w *hijackWatch) Unwrap() http.ResponseWriter { return w.ResponseWriter }
