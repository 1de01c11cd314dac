// Package peering_test runs two fleet-proxy replicas in the test process,
// wired as `fleet proxy` wires them (peer token Secret, peering over the
// replicas' listeners, discovery from the EndpointSlices of Service
// fleet-proxy, the tunnel server rechecking agents' identities), behind the
// real upstream aggregator: a user's request that lands on the replica
// without the agent's tunnel is served through the peer that has it, the
// agent moves when its replica stops, and an agent whose registration is
// deleted loses its open tunnel.
package peering_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authuser "k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/gitops-fleet/fleet/agent/access"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/proxyenv"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/tunnel"
	"github.com/gitops-fleet/fleet/proxy"
)

const (
	proxyNamespace = "fleet-system"
	workspace      = "fleet-default"
)

var (
	env       *controlplane.Env
	logs      *testenv.Logs
	host      string
	servingCA []byte
	// servingCert is the replicas' shared serving certificate.
	servingCert tls.Certificate
	replicas    []*replica
	// tokens are every credential the tests made, to prove none is logged.
	tokens   []string
	tokensMu sync.Mutex
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{
		ControlPlanes: &controlplane.Options{NoControllerManager: true},
		CaptureLogs:   true,
	}, setup)
}

// replica is one fleet-proxy, run as `fleet proxy` runs it.
type replica struct {
	name    string
	addr    proxyenv.Replica
	tunnels *proxy.TunnelServer
	keys    *proxy.SigningKeys
	reg     *prometheus.Registry
	ln      *trackingListener
	stop    func()
	stopped chan struct{}
}

func (r *replica) done() <-chan struct{} { return r.stopped }

// setup starts replicas A and B (at once: both find the peer token Secret
// missing) and registers only A with the aggregator: B joins later.
func setup(s *testenv.Suite) error {
	env, logs = s.Env, s.Logs
	up := env.Upstream
	ctx := s.Context()
	var err error
	if host, err = controlplane.AggregatedServerHost(); err != nil {
		return err
	}
	for _, ns := range []string{proxyNamespace, workspace} {
		if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	if servingCert, servingCA, err = proxy.EnsureServingCertificate(ctx, up.Clientset, proxyNamespace, "fleet-proxy"); err != nil {
		return err
	}
	cert := servingCert
	replicas = make([]*replica, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, name := range []string{"a", "b"} {
		wg.Go(func() { replicas[i], errs[i] = startReplica(ctx, name, cert) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return proxyenv.RegisterReplicas(ctx, up.Client, up.Clientset, proxyNamespace, servingCA, replicas[0].addr)
}

// startReplica runs a replica as cmd/fleet's proxy command does
// (proxy.New), with a signing key of its own.
func startReplica(ctx context.Context, name string, cert tls.Certificate) (*replica, error) {
	up := env.Upstream
	ctx, cancel := context.WithCancel(ctx)
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		cancel()
		return nil, err
	}
	r := &replica{name: name, addr: proxyenv.Replica{Host: host, Port: l.Addr().(*net.TCPAddr).Port},
		reg: prometheus.NewRegistry(), ln: &trackingListener{Listener: l}, stopped: make(chan struct{})}
	p, err := proxy.New(proxy.Options{Config: up.Config, Namespace: proxyNamespace, Replica: name,
		Listener: r.ln, Certificate: &cert, ServingCA: servingCA, PodIP: host,
		Registerer: r.reg, Log: ctrl.Log.WithName(name)})
	if err != nil {
		cancel()
		return nil, err
	}
	r.keys, r.tunnels = p.SigningKeys(), p.Tunnels()
	run := testenv.Go(ctx, "fleet-proxy "+name, p.Run)
	select {
	case <-p.Started():
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	case <-time.After(2 * time.Minute):
		cancel()
		return nil, fmt.Errorf("fleet-proxy %s did not start within 2 minutes", name)
	}
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			// A pod that stops takes its connections with it; the
			// HTTP server's shutdown leaves hijacked ones open.
			cancel()
			_ = run.Wait(15 * time.Second)
			r.ln.closeAll()
			close(r.stopped)
		})
	}
	go func() { <-ctx.Done(); r.stop() }()
	return r, nil
}

// trackingListener remembers the connections it accepted, to close them as
// a stopping process would.
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
	_ = l.Listener.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func remember(tok string) {
	tokensMu.Lock()
	tokens = append(tokens, tok)
	tokensMu.Unlock()
}

// agentToken sets up the request identity of Cluster cluster's agent and
// returns a token of it.
func agentToken(t *testing.T, cluster, reg string) string {
	t.Helper()
	sa, err := proxyenv.AgentIdentity(t.Context(), env.Upstream.Client, workspace, cluster, reg, cluster)
	must(t, err)
	tok, err := env.Upstream.ServiceAccountToken(t.Context(), sa.Namespace, sa.Name, time.Hour)
	must(t, err)
	remember(tok)
	return tok
}

func upstreamTLS(t *testing.T) *tls.Config {
	t.Helper()
	pool, err := certutil.NewPoolFromBytes(env.Upstream.Config.CAData)
	must(t, err)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// startAgent runs a tunnel client of cluster through the upstream API
// server; its handler answers which cluster's agent it is.
func startAgent(t *testing.T, cluster, token string) (*tunnel.Client, *testenv.Runner) {
	t.Helper()
	u, err := tunnel.AttachURL(env.Upstream.Config.Host, workspace, cluster)
	must(t, err)
	c := &tunnel.Client{
		URL:        u,
		Token:      func(context.Context) (string, error) { return token, nil },
		TLS:        upstreamTLS(t),
		MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "agent of %s: %s %s", cluster, r.Method, r.URL.Path)
		}),
	}
	return c, testenv.Start(t, "agent "+cluster, c.Run)
}

// userToken is an upstream ServiceAccount with clusters/proxy on cluster.
func userToken(t *testing.T, name, cluster string) string {
	t.Helper()
	ctx := t.Context()
	c := env.Upstream.Client
	must(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: name}}))
	must(t, c.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters/proxy"},
			ResourceNames: []string{cluster}, Verbs: []string{"get"}}},
	}))
	must(t, c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: workspace, Name: name}},
	}))
	tok, err := env.Upstream.ServiceAccountToken(ctx, workspace, name, time.Hour)
	must(t, err)
	remember(tok)
	return tok
}

// get sends GET <cluster's proxy>/<path> through the upstream API server.
func get(t *testing.T, token, cluster, path string) (int, string) {
	t.Helper()
	url := strings.TrimSuffix(env.Upstream.Config.Host, "/") + "/apis/" + proxy.GroupVersion +
		"/namespaces/" + workspace + "/clusters/" + cluster + "/proxy" + path
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: upstreamTLS(t), DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// served is how many requests for key the replica answered with 200.
func (r *replica) served(t *testing.T, key string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	must(t, err)
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "fleet_proxy_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "cluster") == key && label(m, "code") == "200" {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestPeering_RequestsServedThroughTheReplicaWithTheTunnel: the agent's
// tunnel is on A; B joins; requests the aggregator sends to B are served
// through A; a peer connection without the token is refused; A stops, the
// agent reattaches to B and requests succeed again.
func TestPeering_RequestsServedThroughTheReplicaWithTheTunnel(t *testing.T) {
	ctx := t.Context()
	const cluster = "cluster-p"
	key := workspace + "/" + cluster
	a, b := replicas[0], replicas[1]

	agentTok := agentToken(t, cluster, "reg-p")
	userTok := userToken(t, "user-p", cluster)
	agent, _ := startAgent(t, cluster, agentTok)
	// A is the only endpoint: the tunnel lands there.
	testenv.Eventually(t, 30*time.Second, "the agent's tunnel on A", func() error {
		if a.tunnels.Server.Sessions(key) != 1 || !agent.Connected() {
			return fmt.Errorf("sessions on A %d, connected %v", a.tunnels.Server.Sessions(key), agent.Connected())
		}
		return nil
	})

	// B becomes a ready endpoint: the replicas find each other, and B
	// reaches the agent through A.
	must(t, proxyenv.SetReady(ctx, env.Upstream.Client, proxyNamespace, b.addr, true))
	testenv.Eventually(t, 30*time.Second, "B to hold the cluster through its peer A", func() (bool, error) {
		return b.tunnels.Server.Held(key), nil
	})

	// The aggregator spreads requests over A and B: every one succeeds,
	// and B, which has no session of its own, serves some.
	testenv.Eventually(t, 60*time.Second, "B to serve a request through A", func() error {
		code, body := get(t, userTok, cluster, "/hello")
		if code != http.StatusOK || body != "agent of "+cluster+": GET /hello" {
			t.Fatalf("a request with both replicas up: %d %s", code, body)
		}
		if b.served(t, key) == 0 {
			return fmt.Errorf("B served none yet (A served %v)", a.served(t, key))
		}
		return nil
	})
	if n := b.tunnels.Server.Sessions(key); n != 0 {
		t.Fatalf("B has %d sessions of its own: the request did not go through the peer", n)
	}

	// A peer connection without the token gets 401 and no session;
	// neither do the peer headers open anything else on the listener.
	d := &websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: mustPool(t, servingCA), ServerName: "fleet-proxy." + proxyNamespace + ".svc"},
		HandshakeTimeout: 10 * time.Second}
	peerURL := "wss://" + proxy.PeerID(host, b.addr.Port) + proxy.PeerPath
	aID := proxy.PeerID(host, a.addr.Port)
	for what, h := range map[string]http.Header{
		"A's id with a wrong token": {"X-API-Tunnel-ID": {aID}, "X-API-Tunnel-Token": {"wrong-0123456789-0123456789-0123456789-0123456789"}},
		"A's id without a token":    {"X-API-Tunnel-ID": {aID}},
		"no headers":                {},
	} {
		ws, resp, err := d.DialContext(ctx, peerURL, h)
		if err == nil {
			_ = ws.Close()
			t.Errorf("%s: peer connection accepted", what)
			continue
		}
		if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %v, want 401", what, err)
		}
	}
	direct := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: d.TLSClientConfig, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+proxy.PeerID(host, b.addr.Port)+
		"/apis/"+proxy.GroupVersion+"/namespaces/"+workspace+"/clusters/"+cluster+"/proxy/hello", nil)
	must(t, err)
	req.Header = http.Header{"X-API-Tunnel-ID": {aID}, "X-API-Tunnel-Token": {"wrong-0123456789-0123456789-0123456789-0123456789"}}
	resp, err := direct.Do(req)
	must(t, err)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a direct request with peer headers: %d, want 401", resp.StatusCode)
	}

	// A stops (its endpoint first turns not ready, as a terminating pod's):
	// the agent reattaches through the aggregator to B.
	must(t, proxyenv.SetReady(ctx, env.Upstream.Client, proxyNamespace, a.addr, false))
	a.stop()
	testenv.Eventually(t, 60*time.Second, "the agent's tunnel on B", func() error {
		if n := b.tunnels.Server.Sessions(key); n != 1 {
			return fmt.Errorf("sessions on B %d", n)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, "requests succeed with B alone", func() error {
		code, body := get(t, userTok, cluster, "/again")
		if code != http.StatusOK || body != "agent of "+cluster+": GET /again" {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}

func mustPool(t *testing.T, ca []byte) *x509.CertPool {
	t.Helper()
	pool, err := certutil.NewPoolFromBytes(ca)
	must(t, err)
	return pool
}

// TestRevocation_DeletedRegistrationClosesTheOpenTunnel: the agent's open
// tunnel ends soon after its registration is deleted, and it cannot attach
// again.
func TestRevocation_DeletedRegistrationClosesTheOpenTunnel(t *testing.T) {
	ctx := t.Context()
	const cluster, reg = "cluster-r", "reg-r"
	key := workspace + "/" + cluster
	agentTok := agentToken(t, cluster, reg)
	userTok := userToken(t, "user-r", cluster)
	agent, _ := startAgent(t, cluster, agentTok)
	testenv.Eventually(t, 30*time.Second, "the agent's tunnel", func() error {
		code, body := get(t, userTok, cluster, "/before")
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})

	must(t, env.Upstream.Client.Delete(ctx, &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: reg}}))
	took := testenv.Eventually(t, 20*time.Second, "the open tunnel to close", func() error {
		for _, r := range live() {
			if n := r.tunnels.Server.Sessions(key); n != 0 || r.tunnels.Server.Held(key) {
				return fmt.Errorf("replica %s: %d sessions, held %v", r.name, n, r.tunnels.Server.Held(key))
			}
		}
		if agent.Connected() {
			return fmt.Errorf("the agent is still connected")
		}
		return nil
	})
	t.Logf("the tunnel closed %v after the registration was deleted", took)
	// It keeps trying; every attach is refused and users get 503.
	testenv.Consistently(t, 5*time.Second, "the revoked agent stays out", func() error {
		for _, r := range live() {
			if r.tunnels.Server.Held(key) {
				return fmt.Errorf("replica %s holds the revoked agent's tunnel", r.name)
			}
		}
		if agent.Connected() {
			return fmt.Errorf("the revoked agent reattached")
		}
		return nil
	})
	if code, body := get(t, userTok, cluster, "/after"); code != http.StatusServiceUnavailable {
		t.Errorf("a request after the revocation: %d %s, want 503", code, body)
	}
	if !strings.Contains(logs.String(), "closing an agent tunnel") || !strings.Contains(logs.String(), "ClusterRegistration") {
		t.Error("the log does not say why the tunnel was closed")
	}
}

// live are the replicas still running.
func live() []*replica {
	var rs []*replica
	for _, r := range replicas {
		select {
		case <-r.done():
		default:
			rs = append(rs, r)
		}
	}
	return rs
}

// TestPeerToken_ConcurrentCreationConverges: replicas that find the peer
// token Secret missing at once all end with the one token it holds.
func TestPeerToken_ConcurrentCreationConverges(t *testing.T) {
	ctx := t.Context()
	ns := testenv.Namespace(t, env.Upstream.Client, "peer-token")
	got := make([]string, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i], errs[i] = proxy.EnsurePeerToken(ctx, env.Upstream.Clientset, ns) })
	}
	wg.Wait()
	s, err := env.Upstream.Clientset.CoreV1().Secrets(ns).Get(ctx, proxy.PeerSecret, metav1.GetOptions{})
	must(t, err)
	want := string(s.Data[tunnel.PeerTokenKey])
	if len(want) < 32 {
		t.Fatalf("peer token of %d bytes", len(want))
	}
	for i := range got {
		if errs[i] != nil || got[i] != want {
			t.Errorf("replica %d: error %v, same token %v", i, errs[i], got[i] == want)
		}
	}
}

// TestSigningKeys_EveryReplicasAssertionsVerifyWithKeysReadThroughOne:
// each replica signs with a key of its own, made at its start and kept in
// memory. An agent that read the signing keys through the upstream while
// B was the only replica serving verifies the assertions of a replica that
// started after it (C, serving users' requests through its peer B), end to
// end; and a replica that stops (A earlier, C here) leaves its key
// published, so the direct tokens it signed keep verifying.
func TestSigningKeys_EveryReplicasAssertionsVerifyWithKeysReadThroughOne(t *testing.T) {
	ctx := t.Context()
	const cluster = "cluster-k"
	key := workspace + "/" + cluster
	a, b := replicas[0], replicas[1]
	// B alone serves: A stops (TestPeering stopped it already).
	must(t, proxyenv.SetReady(ctx, env.Upstream.Client, proxyNamespace, a.addr, false))
	a.stop()
	must(t, proxyenv.SetReady(ctx, env.Upstream.Client, proxyNamespace, b.addr, true))
	// C starts (as a restarted replica would, with a new key) and is not an
	// endpoint yet.
	c, err := startReplica(ctx, "c", servingCert)
	must(t, err)
	t.Cleanup(c.stop)
	replicas = append(replicas, c)
	alice := &authuser.DefaultInfo{Name: "alice"}
	directByC, _, err := c.keys.IssueDirect(alice, key, assertion.DirectVerbs, time.Hour)
	must(t, err)

	// The agent reads the keys through the upstream: B answers (A is
	// gone, C no endpoint).
	agentTok := agentToken(t, cluster, "reg-k")
	userTok := userToken(t, "user-k", cluster)
	upstream := &rest.Config{Host: env.Upstream.Config.Host, BearerToken: agentTok, TLSClientConfig: rest.TLSClientConfig{CAData: env.Upstream.Config.CAData}}
	fetch, err := access.UpstreamKeys(upstream)
	must(t, err)
	var keys *assertion.KeySet
	testenv.Eventually(t, 30*time.Second, "the signing keys through B", func() error {
		if keys, err = fetch(ctx); err != nil {
			return err
		}
		for name, r := range map[string]*replica{"A (stopped)": a, "B": b, "C": c} {
			if _, ok := keys.Key(r.keys.KeyID()); !ok {
				return fmt.Errorf("%v lack %s's key %s", keys.KeyIDs(), name, r.keys.KeyID())
			}
		}
		return nil
	})

	// An agent that verifies every assertion with those keys (no refresh).
	verifier := assertion.NewVerifier(keys)
	agent := &tunnel.Client{
		URL:        mustAttachURL(t, cluster),
		Token:      func(context.Context) (string, error) { return agentTok, nil },
		TLS:        upstreamTLS(t),
		MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, err := verifier.Verify(r.Header.Get(assertion.HeaderName), key, time.Now())
			if err != nil {
				http.Error(w, "assertion refused: "+err.Error(), http.StatusUnauthorized)
				return
			}
			fmt.Fprintf(w, "verified %s", id.User)
		}),
	}
	testenv.Start(t, "agent "+cluster, agent.Run)
	testenv.Eventually(t, 30*time.Second, "the agent's tunnel on B", func() error {
		if b.tunnels.Server.Sessions(key) != 1 {
			return fmt.Errorf("sessions on B %d", b.tunnels.Server.Sessions(key))
		}
		return nil
	})

	// C becomes an endpoint: users' requests land on B and on C, each
	// signed by its own key, and all verify.
	must(t, proxyenv.SetReady(ctx, env.Upstream.Client, proxyNamespace, c.addr, true))
	testenv.Eventually(t, 30*time.Second, "C to hold the cluster through its peer B", func() (bool, error) {
		return c.tunnels.Server.Held(key), nil
	})
	testenv.Eventually(t, 60*time.Second, "C to serve a request the agent verified", func() error {
		code, body := get(t, userTok, cluster, "/hello")
		if code == http.StatusServiceUnavailable {
			// The aggregator still routes to the stopped A for a moment.
			return fmt.Errorf("%d %s", code, body)
		}
		if code != http.StatusOK || !strings.HasPrefix(body, "verified system:serviceaccount:"+workspace+":user-k") {
			t.Fatalf("a request with B and C serving: %d %s", code, body)
		}
		if c.served(t, key) == 0 {
			return fmt.Errorf("C served none yet (B served %v)", b.served(t, key))
		}
		return nil
	})

	// C stops: its key stays published, its direct token still verifies
	// with the keys read again through B.
	must(t, proxyenv.SetReady(ctx, env.Upstream.Client, proxyNamespace, c.addr, false))
	c.stop()
	// The upstream's aggregator may still route to C until its endpoint
	// informer sees C not ready: a 503 until then.
	testenv.Eventually(t, 30*time.Second, "the signing keys through B after C stopped", func() error {
		keys, err = fetch(ctx)
		return err
	})
	if _, err := assertion.NewVerifier(keys).VerifyDirect(directByC, key, time.Now()); err != nil {
		t.Errorf("a direct token of the stopped replica C, with the keys read through B: %v", err)
	}
}

func mustAttachURL(t *testing.T, cluster string) string {
	t.Helper()
	u, err := tunnel.AttachURL(env.Upstream.Config.Host, workspace, cluster)
	must(t, err)
	return u
}

// TestZZ_NoTokenInTheLogs runs last: no credential the tests made, nor the
// peer token, is in the log.
func TestZZ_NoTokenInTheLogs(t *testing.T) {
	s, err := env.Upstream.Clientset.CoreV1().Secrets(proxyNamespace).Get(t.Context(), proxy.PeerSecret, metav1.GetOptions{})
	must(t, err)
	tokensMu.Lock()
	defer tokensMu.Unlock()
	for i, tok := range append([]string{string(s.Data[tunnel.PeerTokenKey])}, tokens...) {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("credential %d is in the log", i)
		}
	}
}
