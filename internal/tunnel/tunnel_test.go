package tunnel_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/tunnel"
)

const key = "fleet-default/cluster-a"

// upstream is a tunnel Server behind a real TLS listener on 127.0.0.1. It
// maps bearer tokens to cluster keys, as fleet-proxy maps identities.
type upstream struct {
	t      *testing.T
	server *tunnel.Server
	reg    *prometheus.Registry
	http   *httptest.Server
	ln     *trackingListener
	addr   string
	cert   *tls.Certificate
	tokens map[string]string
	mu     sync.Mutex
	seen   []string
}

// newUpstream makes a tunnel server that knows one agent token; observer,
// when given, is told of its sessions.
func newUpstream(t *testing.T, addr string, cert *tls.Certificate, observer ...tunnel.Observer) *upstream {
	t.Helper()
	u := &upstream{t: t, tokens: map[string]string{"token-a": key}, reg: prometheus.NewRegistry()}
	var obs tunnel.Observer
	if len(observer) > 0 {
		obs = observer[0]
	}
	var err error
	u.server, err = tunnel.NewServer(tunnel.ServerOptions{Observer: obs, Registerer: u.reg, Authenticate: func(req *http.Request) (string, error) {
		token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		u.mu.Lock()
		defer u.mu.Unlock()
		u.seen = append(u.seen, token)
		if k, found := u.tokens[token]; ok && found {
			return k, nil
		}
		return "", fmt.Errorf("%w: unknown token", tunnel.ErrNotAnAgent)
	}})
	if err != nil {
		t.Fatal(err)
	}
	u.start(addr, cert)
	return u
}

// start serves on addr (a fresh port when empty) with cert (a fresh one
// when nil): a restart keeps both, as a restarted fleet-proxy would.
func (u *upstream) start(addr string, cert *tls.Certificate) {
	u.t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	testenv.Eventually(u.t, 10*time.Second, "listening on "+addr, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	u.ln = &trackingListener{Listener: ln}
	mux := http.NewServeMux()
	mux.Handle("/peer", u.server.PeerHandler())
	mux.Handle("/", u.server)
	u.http = httptest.NewUnstartedServer(mux)
	u.http.Listener = u.ln
	if cert != nil {
		u.http.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
	}
	u.http.StartTLS()
	u.addr = ln.Addr().String()
	if cert == nil {
		c := u.http.TLS.Certificates[0]
		u.cert = &c
	} else {
		u.cert = cert
	}
	u.t.Cleanup(u.stop)
}

// stop ends the server as a process exit would: every connection goes,
// the hijacked tunnels too (httptest forgets those).
func (u *upstream) stop() {
	u.ln.closeAll()
	u.http.Close()
}

type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackingListener) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

func (u *upstream) tls() *tls.Config {
	leaf, err := x509.ParseCertificate(u.cert.Certificate[0])
	if err != nil {
		u.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &tls.Config{RootCAs: pool, ServerName: "example.com"}
}

// agent runs a tunnel Client whose handler answers with its name.
func (u *upstream) agent(t *testing.T, name, token string) (*tunnel.Client, context.CancelFunc) {
	t.Helper()
	url, err := tunnel.AttachURL("https://"+u.addr, "fleet-default", "cluster-a")
	if err != nil {
		t.Fatal(err)
	}
	c := &tunnel.Client{
		URL:        url,
		Token:      func(context.Context) (string, error) { return token, nil },
		TLS:        u.tls(),
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, StableAfter: time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s %s", name, r.Method, r.URL.Path)
		}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := testenv.Go(ctx, "tunnel client "+name, c.Run)
	stop := func() {
		cancel()
		if err := r.Wait(10 * time.Second); err != nil {
			t.Errorf("tunnel client %s: %v", name, err)
		}
	}
	t.Cleanup(stop)
	return c, stop
}

func get(rt http.RoundTripper, path string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://ignored.invalid"+path, nil)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rt.RoundTrip(req.WithContext(ctx))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), err
}

func waitSessions(t *testing.T, u *upstream, n int) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, fmt.Sprintf("%d sessions for %s", n, key), func() error {
		if got := u.server.Sessions(key); got != n || (n > 0) != u.server.HasSession(key) {
			return fmt.Errorf("%d sessions (HasSession %v)", got, u.server.HasSession(key))
		}
		return nil
	})
}

func TestRequestThroughTheTunnelReachesTheAgentsHandler(t *testing.T) {
	obs := &countingObserver{}
	u := newUpstream(t, "", nil, obs)
	connected, disconnected := &obs.connected, &obs.disconnected
	if _, ok := u.server.RoundTripper(key); ok {
		t.Fatal("RoundTripper before any agent connected")
	}
	c, stop := u.agent(t, "agent-1", "token-a")
	waitSessions(t, u, 1)
	testenv.Eventually(t, 5*time.Second, "the client to see its tunnel up", func() (bool, error) {
		return c.Connected() && c.DownSince().IsZero(), nil
	})

	// While the tunnel is up the watchdog stays quiet.
	watchCtx, cancelWatch := context.WithTimeout(context.Background(), 500*time.Millisecond)
	if err := c.Watch(watchCtx, 100*time.Millisecond); err != nil {
		t.Errorf("Watch with the tunnel up: %v", err)
	}
	cancelWatch()

	rt, ok := u.server.RoundTripper(key)
	if !ok {
		t.Fatal("no RoundTripper with a session")
	}
	for i := range 3 {
		got, err := get(rt, fmt.Sprintf("/api/v1/namespaces/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("agent-1 GET /api/v1/namespaces/%d", i); got != want {
			t.Fatalf("answer %q, want %q", got, want)
		}
	}
	if rt2, _ := u.server.RoundTripper(key); rt2 != rt {
		t.Error("the transport is not kept per key")
	}
	if got := testutil.ToFloat64(gauge(t, u.reg, "fleet_proxy_tunnels")); got != 1 {
		t.Errorf("fleet_proxy_tunnels = %v", got)
	}
	if !u.server.Held(key) || u.server.Held("fleet-default/cluster-b") {
		t.Error("Held does not follow the sessions")
	}
	if connected.Load() != 1 {
		t.Errorf("Observer.Connected called %d times", connected.Load())
	}
	if _, ok := u.server.RoundTripper("fleet-default/cluster-b"); ok {
		t.Error("a RoundTripper for a cluster without a tunnel")
	}

	stop()
	waitSessions(t, u, 0)
	if _, ok := u.server.RoundTripper(key); ok {
		t.Error("RoundTripper kept after the session went")
	}
	if disconnected.Load() != 1 {
		t.Errorf("Observer.Disconnected called %d times", disconnected.Load())
	}
	if got := testutil.ToFloat64(gauge(t, u.reg, "fleet_proxy_tunnels")); got != 0 {
		t.Errorf("fleet_proxy_tunnels = %v after disconnect", got)
	}
	if u.server.Held(key) {
		t.Error("Held after the session went")
	}
	for name, want := range map[string]float64{"fleet_proxy_tunnel_connects_total": 1, "fleet_proxy_tunnel_disconnects_total": 1} {
		if got := testutil.ToFloat64(gauge(t, u.reg, name)); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// gauge finds a registered metric (a gauge or counter) by name, as a
// collector for testutil.
func gauge(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			m := mf.GetMetric()[0]
			if m.GetCounter() != nil {
				g.Set(m.GetCounter().GetValue())
			} else {
				g.Set(m.GetGauge().GetValue())
			}
			return g
		}
	}
	t.Fatalf("metric %s not registered", name)
	return nil
}

func TestClientRefusesEveryOtherAddress(t *testing.T) {
	// A real listener the agent could reach: it must never be dialed.
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()

	u := newUpstream(t, "", nil)

	// remotedialer ends the session on a connect its ConnectAuthorizer
	// refuses; the agent connects again.
	c, _ := u.agent(t, "agent-1", "token-a")
	for i, target := range []struct{ network, addr string }{
		{"tcp", target.Addr().String()},
		{"unix", target.Addr().String()},
		{"tcp", "agent-access:80"},
		{"tcp", "kubernetes.default.svc:443"},
	} {
		waitSessions(t, u, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := u.server.Dial(ctx, key, target.network, target.addr)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			_, err = bufio.NewReader(conn).ReadByte()
			conn.Close()
		}
		cancel()
		if err == nil {
			t.Fatalf("%s/%s: the agent answered", target.network, target.addr)
		}
		if msg := err.Error(); !strings.Contains(msg, "connect not allowed") && !strings.Contains(msg, "tunnel disconnect") {
			t.Errorf("%s/%s: error %v, want the agent's refusal", target.network, target.addr, err)
		}
		testenv.Eventually(t, 10*time.Second, "the agent to connect again", func() (bool, error) {
			return c.Connections() >= i+2 && c.Connected(), nil
		})
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the agent dialed a real address %d times", n)
	}
	// The tunnel is usable again after the refusals.
	waitSessions(t, u, 1)
	rt, ok := u.server.RoundTripper(key)
	if !ok {
		t.Fatal("session gone after refusals")
	}
	if _, err := get(rt, "/healthz"); err != nil {
		t.Fatal(err)
	}
}

func TestUnauthenticatedAgentGetsNoTunnel(t *testing.T) {
	u := newUpstream(t, "", nil)
	c, _ := u.agent(t, "intruder", "token-unknown")
	testenv.Eventually(t, 10*time.Second, "two refused attempts", func() (bool, error) {
		return testutil.ToFloat64(counter(t, u.reg, "fleet_proxy_tunnel_refused_total")) >= 2, nil
	})
	if u.server.HasSession(key) || c.Connected() || c.Connections() != 0 {
		t.Fatal("a refused agent holds a tunnel")
	}
	if c.DownSince().IsZero() {
		t.Error("DownSince is zero for a client that never connected")
	}
	// The token went only in the Authorization header, and the client
	// asked again with its current token.
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.seen {
		if s != "token-unknown" {
			t.Errorf("server saw bearer %q", s)
		}
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: name})
			c.Add(mf.GetMetric()[0].GetCounter().GetValue())
			return c
		}
	}
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name})
}

func TestTwoAgentReplicas_RequestsGoOnWhenOneGoes(t *testing.T) {
	u := newUpstream(t, "", nil)
	_, stop1 := u.agent(t, "replica-1", "token-a")
	waitSessions(t, u, 1)
	_, _ = u.agent(t, "replica-2", "token-a")
	waitSessions(t, u, 2)

	rt, ok := u.server.RoundTripper(key)
	if !ok {
		t.Fatal("no RoundTripper")
	}
	got, err := get(rt, "/")
	if err != nil || !strings.HasPrefix(got, "replica-1 ") {
		t.Fatalf("first replica's session serves: %q, %v", got, err)
	}

	stop1()
	waitSessions(t, u, 1)
	// The same transport (the key kept a session) now reaches replica 2.
	rt2, ok := u.server.RoundTripper(key)
	if !ok {
		t.Fatal("no RoundTripper with one replica left")
	}
	for i := range 5 {
		got, err := get(rt2, "/")
		if err != nil {
			t.Fatalf("request %d after replica 1 went: %v", i, err)
		}
		if !strings.HasPrefix(got, "replica-2 ") {
			t.Fatalf("request %d answered by %q", i, got)
		}
	}
}

func TestClientReconnectsWhenTheServerComesBack(t *testing.T) {
	u := newUpstream(t, "", nil)
	c, _ := u.agent(t, "agent-1", "token-a")
	waitSessions(t, u, 1)
	addr, cert := u.addr, u.cert

	u.stop()
	testenv.Eventually(t, 10*time.Second, "the client to see its tunnel down", func() (bool, error) {
		return !c.Connected() && !c.DownSince().IsZero(), nil
	})
	down := c.DownSince()
	if !c.DownLongerThan(time.Nanosecond, time.Now()) || c.DownLongerThan(time.Hour, time.Now()) {
		t.Error("DownLongerThan does not follow DownSince")
	}

	// The agent's watchdog fires once the tunnel stayed down longer than
	// its bound.
	watchCtx, cancelWatch := context.WithTimeout(context.Background(), 10*time.Second)
	err := c.Watch(watchCtx, 300*time.Millisecond)
	cancelWatch()
	if !errors.Is(err, tunnel.ErrTunnelDown) {
		t.Fatalf("Watch: %v, want ErrTunnelDown", err)
	}

	// A new server (as a restarted fleet-proxy) on the same address.
	u.start(addr, cert)
	took := testenv.Eventually(t, 10*time.Second, "the client to reconnect", func() (bool, error) {
		return c.Connected() && c.Connections() == 2, nil
	})
	// MaxBackoff is 200ms: a reconnect never waits much longer than that
	// after the server is back (handshake and polling on top).
	if took > 3*time.Second {
		t.Errorf("reconnect took %s with a 200ms backoff cap", took)
	}
	if !c.DownSince().IsZero() {
		t.Errorf("DownSince %s after reconnecting (down since %s)", c.DownSince(), down)
	}
	waitSessions(t, u, 1)
	rt, ok := u.server.RoundTripper(key)
	if !ok {
		t.Fatal("no RoundTripper after reconnect")
	}
	if _, err := get(rt, "/"); err != nil {
		t.Fatal(err)
	}
}

func TestAttachURL(t *testing.T) {
	got, err := tunnel.AttachURL("https://fleet.example.com:6443/", "fleet-default", "c1")
	if err != nil {
		t.Fatal(err)
	}
	if want := "wss://fleet.example.com:6443/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/fleet-default/clusters/c1/attach"; got != want {
		t.Errorf("AttachURL = %q, want %q", got, want)
	}
	if _, err := tunnel.AttachURL("ftp://x", "a", "b"); err == nil {
		t.Error("AttachURL accepted a non-https address")
	}
}

// TestRecheck_ClosesSessionsTheIdentityMayNoLongerHold: an open tunnel is
// cut when its identity stops mapping to the Cluster, and stays cut.
func TestRecheck_ClosesSessionsTheIdentityMayNoLongerHold(t *testing.T) {
	u := newUpstream(t, "", nil)
	u.tokens["token-c"] = key
	a, _ := u.agent(t, "agent-a", "token-a")
	u.agent(t, "agent-c", "token-c")
	waitSessions(t, u, 2)
	if n := u.server.Recheck(); n != 0 {
		t.Fatalf("Recheck closed %d sessions of allowed identities", n)
	}
	if !u.server.Held(key) {
		t.Fatal("Held is false with a session")
	}

	// C's identity now maps to another Cluster: its session of this one
	// is closed, A's stays.
	u.mu.Lock()
	u.tokens["token-c"] = "fleet-default/cluster-b"
	u.mu.Unlock()
	if n := u.server.Recheck(); n != 1 {
		t.Fatalf("Recheck closed %d sessions, want C's", n)
	}
	waitSessions(t, u, 1)

	// A is revoked: closed, and its reattaches are refused.
	u.mu.Lock()
	delete(u.tokens, "token-a")
	u.mu.Unlock()
	if n := u.server.Recheck(); n != 1 {
		t.Fatalf("Recheck closed %d sessions, want A's", n)
	}
	waitSessions(t, u, 0)
	testenv.Eventually(t, 10*time.Second, "a refused reattach", func() (bool, error) {
		return testutil.ToFloat64(counter(t, u.reg, "fleet_proxy_tunnel_refused_total")) >= 1, nil
	})
	if u.server.Held(key) || a.Connected() {
		t.Fatal("the revoked agent holds a tunnel again")
	}
	if n := testutil.ToFloat64(counter(t, u.reg, "fleet_proxy_tunnel_revoked_total")); n != 2 {
		t.Errorf("revoked counter %v, want 2", n)
	}
}

// countingObserver counts the sessions of key that start and end.
type countingObserver struct{ connected, disconnected atomic.Int32 }

func (o *countingObserver) Connected(k string, _ int) {
	if k == key {
		o.connected.Add(1)
	}
}

func (o *countingObserver) Disconnected(k string, _ int) {
	if k == key {
		o.disconnected.Add(1)
	}
}
