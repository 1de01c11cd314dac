package proxy_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"

	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/proxyenv"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/proxy"
)

const proxyNamespace = "fleet-system"

var (
	env  *controlplane.Env
	keys *proxy.SigningKeys
	// fleetProxy is fleet-proxy as `fleet proxy` runs it.
	fleetProxy *proxy.Proxy
	// proxyAddr is fleet-proxy's listener, for requests that bypass the
	// upstream API server.
	proxyAddr string
	// endpointAddr is fleet-proxy's endpoint (bearer tokens, no aggregator).
	endpointAddr string
	backend      *httptest.Server
	// servingCA verifies fleet-proxy's serving certificate.
	servingCA []byte
	logs      *testenv.Logs
	// tokens are every user token the tests made, to prove none is logged.
	tokens   []string
	tokensMu sync.Mutex
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{}, CaptureLogs: true}, setup)
}

// connect makes what a grant leaves for Cluster key's agent ("<ws>/<name>")
// and attaches its tunnel through the upstream API server as that request
// identity, serving the backend (a real HTTP handler playing the agent's
// access handler) until the test ends. It returns once fleet-proxy holds
// the session.
func connect(t *testing.T, key string) {
	t.Helper()
	ctx := t.Context()
	ws, name, _ := strings.Cut(key, "/")
	sa, err := proxyenv.AgentIdentity(ctx, env.Upstream.Client, ws, name, "reg-"+name, name)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := env.Upstream.ServiceAccountToken(ctx, sa.Namespace, sa.Name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tokensMu.Lock()
	tokens = append(tokens, tok)
	tokensMu.Unlock()
	c, err := proxyenv.TunnelClient(env.Upstream.ConfigForToken(tok), ws, name, http.HandlerFunc(backendHandler))
	if err != nil {
		t.Fatal(err)
	}
	agentCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(agentCtx) }()
	t.Cleanup(func() { stop(); <-done })
	testenv.Eventually(t, 30*time.Second, "the agent tunnel of "+key, func() error {
		if !fleetProxy.Tunnels().Server.HasSession(key) {
			return errors.New("no session")
		}
		return nil
	})
}

// echo is what the backend answers: what it received.
type echo struct {
	Cluster string      `json:"cluster"`
	Method  string      `json:"method"`
	Path    string      `json:"path"`
	Query   string      `json:"query"`
	Host    string      `json:"host"`
	Header  http.Header `json:"header"`
}

func backendHandler(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/watch":
		// A watch: an event every 300 ms for 4 s, flushed each time.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		for i := range 14 {
			fmt.Fprintf(w, "{\"type\":\"ADDED\",\"n\":%d}\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	case r.URL.Path == "/watch-long":
		// A watch that lasts until the client or the proxy ends it (two
		// minutes at most): an event every 200 ms.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		for i := range 600 {
			fmt.Fprintf(w, "{\"type\":\"ADDED\",\"n\":%d}\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	case r.Header.Get("Upgrade") != "":
		// A minimal upgrade to whatever protocol was asked (fleet-test,
		// SPDY/3.1, websocket): 101, then echo each line back.
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + r.Header.Get("Upgrade") + "\r\nX-Query: " + r.URL.RawQuery + "\r\n\r\n")
		_ = buf.Flush()
		for {
			line, err := buf.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = buf.WriteString("echo " + line)
			_ = buf.Flush()
		}
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(echo{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Host: r.Host, Header: r.Header})
	}
}

func setup(s *testenv.Suite) error {
	env = s.Env
	logs = s.Logs
	up := env.Upstream
	ctx := s.Context()
	backend = httptest.NewServer(http.HandlerFunc(backendHandler))
	go func() { <-ctx.Done(); backend.Close() }()

	host, err := controlplane.AggregatedServerHost()
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return err
	}
	proxyAddr = l.Addr().String()
	port := l.Addr().(*net.TCPAddr).Port
	svcName := "fleet-proxy." + proxyNamespace + ".svc"
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(svcName, []net.IP{net.ParseIP(host)}, []string{svcName})
	if err != nil {
		return err
	}
	servingCA = certPEM
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}

	el, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return err
	}
	endpointAddr = el.Addr().String()

	if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: proxyNamespace}}); err != nil {
		return err
	}
	// What the chart makes with proxy.endpoint.url; fleet-proxy adds the CA.
	if err := proxyenv.RegisterEndpoint(ctx, up.Client, "https://"+endpointAddr); err != nil {
		return err
	}
	if fleetProxy, err = proxy.New(proxy.Options{Config: up.Config, Namespace: proxyNamespace, Replica: "test",
		Listener: l, Certificate: &cert, ServingCA: certPEM, StreamRecheckInterval: time.Second,
		EndpointListener: el, PublishEndpointCA: true}); err != nil {
		return err
	}
	keys = fleetProxy.SigningKeys()
	s.Go("fleet-proxy", fleetProxy.Run)
	select {
	case <-fleetProxy.Started():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(2 * time.Minute):
		return errors.New("fleet-proxy did not start within 2 minutes")
	}

	// What the chart installs, pointing at this test process.
	return proxyenv.Register(ctx, up.Client, up.Clientset, proxyNamespace, host, port, certPEM)
}

// user is an upstream ServiceAccount with a bearer token, calling the
// upstream API server over HTTP/1.1 (so that it can send Connection
// headers).
type user struct {
	name   string
	token  string
	client *http.Client
}

func newUser(t *testing.T, ns, name string) *user {
	t.Helper()
	up := env.Upstream
	if err := up.Client.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	tok, err := up.ServiceAccountToken(t.Context(), ns, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tokensMu.Lock()
	tokens = append(tokens, tok)
	tokensMu.Unlock()
	cfg := up.ConfigForToken(tok)
	cfg.NextProtos = []string{"http/1.1"}
	return &user{name: "system:serviceaccount:" + ns + ":" + name, token: tok, client: httpClient(t, cfg.CAData, nil)}
}

func httpClient(t *testing.T, ca []byte, cert *tls.Certificate) *http.Client {
	t.Helper()
	pool, err := certutil.NewPoolFromBytes(ca)
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: tc, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
}

// do sends a request through the upstream API server.
func (u *user) do(t *testing.T, method, path string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, strings.TrimSuffix(env.Upstream.Config.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+u.token)
	resp, err := u.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// grant gives name (a user) the right fleet.cattle.io clusters/proxy on the
// named Clusters of ws.
func grant(t *testing.T, ws, name string, clusters ...string) {
	t.Helper()
	grantVerbs(t, ws, name, []string{"get", "create", "update", "patch", "delete"}, clusters...)
}

// grantVerbs gives name (a user) verbs of fleet.cattle.io clusters/proxy on
// the named Clusters of ws.
func grantVerbs(t *testing.T, ws, name string, verbs []string, clusters ...string) {
	t.Helper()
	c := env.Upstream.Client
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, GenerateName: "cluster-proxy-"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters/proxy"},
			ResourceNames: clusters, Verbs: verbs}},
	}
	if err := c.Create(t.Context(), role); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: name}},
	}); err != nil {
		t.Fatal(err)
	}
}

func clusterPath(ws, cluster, inner string) string {
	return "/apis/" + proxy.GroupVersion + "/namespaces/" + ws + "/clusters/" + cluster + "/proxy" + inner
}

func readEcho(t *testing.T, resp *http.Response) echo {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var e echo
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("not the backend's answer: %v: %s", err, b)
	}
	return e
}

// status reads a refusal: its code and message.
func status(t *testing.T, resp *http.Response) (int, string) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var st metav1.Status
	if err := json.Unmarshal(b, &st); err != nil {
		return resp.StatusCode, string(b)
	}
	return resp.StatusCode, st.Message
}

// eventuallyRefused retries a request until fleet-proxy itself refuses it
// with code and a message holding want. The status code alone does not
// tell: until the upstream API server's RBAC cache holds a new grant, or
// while it finds fleet-proxy's APIService unavailable, the aggregator
// answers 403 or 503 of its own.
func eventuallyRefused(t *testing.T, what string, code int, want string, do func() *http.Response) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, func() error {
		got, msg := status(t, do())
		if got != code || !strings.Contains(msg, want) {
			return fmt.Errorf("status %d: %s", got, msg)
		}
		return nil
	})
}

// eventually retries a request until the want status (RBAC and the 10 s
// authorization cache settle).
func eventuallyStatus(t *testing.T, what string, want int, do func() *http.Response) *http.Response {
	t.Helper()
	var resp *http.Response
	testenv.Eventually(t, 30*time.Second, what, func() error {
		resp = do()
		if resp.StatusCode == want {
			return nil
		}
		code, msg := status(t, resp)
		return fmt.Errorf("status %d: %s", code, msg)
	})
	return resp
}
