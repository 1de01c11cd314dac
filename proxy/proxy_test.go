package proxy_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnuser "k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/tunnel"
	"github.com/gitops-fleet/fleet/proxy"
)

// assertedUser verifies the assertion the backend received for cluster and
// returns the user it names.
func assertedUser(t *testing.T, e echo, cluster string) assertion.Identity {
	t.Helper()
	tok := e.Header.Get(assertion.HeaderName)
	if tok == "" {
		t.Fatalf("the backend got no %s header; headers: %v", assertion.HeaderName, names(e.Header))
	}
	id, err := assertion.NewVerifier(keys.KeySet()).Verify(tok, cluster, time.Now())
	if err != nil {
		t.Fatalf("assertion does not verify for %s: %v", cluster, err)
	}
	return id
}

func names(h http.Header) []string {
	var out []string
	for k := range h {
		out = append(out, k)
	}
	return out
}

// forbiddenHeaders are what must never reach a cluster.
func checkClean(t *testing.T, h http.Header) {
	t.Helper()
	for k, v := range h {
		lk := strings.ToLower(k)
		if lk == "connection" && fmt.Sprint(v) == "[close]" {
			continue // fleet-proxy's own hop: no keep-alive to the agent
		}
		for _, p := range []string{"authorization", "impersonate-", "x-remote-", "x-forwarded-", "connection", "proxy-authorization"} {
			if strings.HasPrefix(lk, p) {
				t.Errorf("header %s reached the cluster", k)
			}
		}
	}
}

func TestDiscovery_ServedThroughTheUpstream(t *testing.T) {
	rl, err := env.Upstream.Clientset.Discovery().ServerResourcesForGroupVersion(proxy.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range rl.APIResources {
		got[r.Name] = true
	}
	for _, want := range []string{"clusters", "clusters/proxy", "clusters/attach", "signingkeys"} {
		if !got[want] {
			t.Errorf("discovery lacks %s: %v", want, got)
		}
	}
}

func TestSigningKeys_JWKSThroughTheUpstream(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "keys-")
	u := newUser(t, ns, "agent")
	resp := u.do(t, http.MethodGet, assertion.SigningKeysPath, nil)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	ks, err := assertion.ParseKeySet(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ks.KeyIDs(), keys.KeySet().KeyIDs(); fmt.Sprint(got) != fmt.Sprint(want) || len(got) == 0 {
		t.Errorf("key ids %v, want %v", got, want)
	}
	if strings.Contains(string(b), `"d"`) {
		t.Error("the JWK Set holds a private key")
	}
}

// Plain requests to one cluster share the streams of its tunnel; nothing
// of a user stays with a stream: interleaved requests of two users each
// reach the agent with their own assertion and none of the other's
// credentials.
func TestProxy_RequestsSharingStreamsKeepTheirOwnIdentity(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	alice, carol := newUser(t, users, "alice"), newUser(t, users, "carol")
	grant(t, ws, alice.name, "c1")
	grant(t, ws, carol.name, "c1")
	connect(t, ws+"/c1")
	for _, u := range []*user{alice, carol} {
		eventuallyStatus(t, u.name+" reaching c1", http.StatusOK, func() *http.Response {
			return u.do(t, http.MethodGet, clusterPath(ws, "c1", "/api"), nil)
		}).Body.Close()
	}
	for i := range 6 {
		u, other := alice, carol
		if i%2 == 1 {
			u, other = carol, alice
		}
		e := readEcho(t, u.do(t, http.MethodGet, clusterPath(ws, "c1", "/api/v1/namespaces"), nil))
		if id := assertedUser(t, e, ws+"/c1"); id.User != u.name {
			t.Fatalf("request %d of %s reached the agent as %q", i, u.name, id.User)
		}
		if h := fmt.Sprint(e.Header); strings.Contains(h, other.token) || strings.Contains(h, u.token) {
			t.Fatalf("request %d of %s carried a user's token to the agent", i, u.name)
		}
	}
}

func TestProxy_UserWithTheRightReachesOnlyThatCluster(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	alice, bob := newUser(t, users, "alice"), newUser(t, users, "bob")
	grant(t, ws, alice.name, "c1")
	connect(t, ws+"/c1")
	connect(t, ws+"/c2")

	resp := eventuallyStatus(t, "alice reaching c1", http.StatusOK, func() *http.Response {
		return alice.do(t, http.MethodGet, clusterPath(ws, "c1", "/api/v1/namespaces/default/pods?limit=1"), nil)
	})
	e := readEcho(t, resp)
	if e.Path != "/api/v1/namespaces/default/pods" || e.Query != "limit=1" || e.Method != http.MethodGet {
		t.Errorf("backend got %s %s?%s", e.Method, e.Path, e.Query)
	}
	checkClean(t, e.Header)
	if id := assertedUser(t, e, ws+"/c1"); id.User != alice.name {
		t.Errorf("assertion names %q, want %q", id.User, alice.name)
	}
	if strings.Contains(fmt.Sprint(e.Header), alice.token) {
		t.Error("the user's token reached the cluster")
	}

	// POST maps to create, which alice has too.
	e = readEcho(t, alice.do(t, http.MethodPost, clusterPath(ws, "c1", "/api/v1/namespaces"), nil))
	if e.Method != http.MethodPost {
		t.Errorf("backend got %s", e.Method)
	}

	code, msg := status(t, alice.do(t, http.MethodGet, clusterPath(ws, "c2", "/api"), nil))
	if code != http.StatusForbidden || !strings.Contains(msg, "cannot get fleet.cattle.io clusters/proxy on Cluster "+ws+"/c2") {
		t.Errorf("alice on c2: %d %s", code, msg)
	}
	code, msg = status(t, bob.do(t, http.MethodGet, clusterPath(ws, "c1", "/api"), nil))
	if code != http.StatusForbidden || !strings.Contains(msg, bob.name) {
		t.Errorf("bob on c1: %d %s", code, msg)
	}
	// Without the right, not even whether a cluster is connected shows.
	code, msg = status(t, bob.do(t, http.MethodGet, clusterPath(ws, "c9", "/api"), nil))
	if code != http.StatusForbidden || strings.Contains(msg, "connected") {
		t.Errorf("bob on a disconnected cluster: %d %s", code, msg)
	}
}

// A cluster without a tunnel answers 503 with why, read from its Cluster:
// none, registering, registered a moment ago (then with a Retry-After, so
// clients wait for the tunnel instead of failing), or the Connected
// condition's message.
func TestProxy_NotConnectedCluster503(t *testing.T) {
	ctx := t.Context()
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	alice := newUser(t, users, "alice")
	grant(t, ws, alice.name, "offline")
	get := func() *http.Response { return alice.do(t, http.MethodGet, clusterPath(ws, "offline", "/api"), nil) }
	eventuallyRefused(t, "503 for a cluster without a tunnel", http.StatusServiceUnavailable,
		"cluster "+ws+"/offline is not connected: there is no such Cluster", get)

	// The Cluster turns Ready, its agent has not attached yet.
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "offline"}}
	if err := env.Upstream.Client.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: fleet.ReadyCondition, Status: metav1.ConditionTrue,
		Reason: fleet.AgentHeartbeatReason, Message: "heartbeat"})
	if err := env.Upstream.Client.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	var retryAfter string
	testenv.Eventually(t, 30*time.Second, "503 saying the agent is opening its tunnel, with a Retry-After", func() error {
		resp := get()
		retryAfter = resp.Header.Get("Retry-After")
		code, msg := status(t, resp)
		if code != http.StatusServiceUnavailable || !strings.Contains(msg, "its agent has just registered and is opening its tunnel") {
			return fmt.Errorf("%d %q", code, msg)
		}
		return nil
	})
	if retryAfter != "1" {
		t.Errorf("Retry-After %q, want 1", retryAfter)
	}

	// fleet-proxy said the tunnel went: its message, no Retry-After.
	const down = "No agent tunnel since 2026-01-02T03:04:05Z: check the fleet-agent pods"
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: fleet.ConnectedCondition, Status: metav1.ConditionFalse,
		Reason: fleet.TunnelDownReason, Message: down})
	if err := env.Upstream.Client.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "503 with the Connected condition's message", func() error {
		resp := get()
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			return fmt.Errorf("Retry-After %q", ra)
		}
		if code, msg := status(t, resp); code != http.StatusServiceUnavailable || msg != "cluster "+ws+"/offline is not connected: "+down {
			return fmt.Errorf("%d %q", code, msg)
		}
		return nil
	})
}

// Why a cluster holds no tunnel, from its Cluster, for each state.
func TestNotConnected_SaysWhy(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	cluster := func(conds ...metav1.Condition) *fleet.Cluster {
		c := &fleet.Cluster{Spec: fleet.ClusterSpec{AgentNamespace: "cattle-fleet-system"}}
		c.Status.Conditions = conds
		return c
	}
	cond := func(typ string, st metav1.ConditionStatus, reason, msg string, ago time.Duration) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(now.Add(-ago))}
	}
	for _, tc := range []struct {
		name  string
		c     *fleet.Cluster
		want  []string
		retry int
	}{
		{"no Cluster", nil, []string{"there is no such Cluster"}, 0},
		{"not registered", cluster(), []string{"has not registered yet"}, 0},
		{"offline", cluster(cond(fleet.ReadyCondition, metav1.ConditionFalse, "Offline", "no heartbeat for 3m", time.Hour)),
			[]string{"not registered yet or is offline", "Ready=False", "Offline: no heartbeat for 3m"}, 0},
		{"just registered", cluster(cond(fleet.ReadyCondition, metav1.ConditionTrue, "AgentHeartbeat", "", time.Second)),
			[]string{"just registered and is opening its tunnel"}, 1},
		{"registered long ago, never a tunnel", cluster(cond(fleet.ReadyCondition, metav1.ConditionTrue, "AgentHeartbeat", "", time.Hour)),
			[]string{"since 2026-12-05T11:00:00Z", "access.enabled", "--access", "namespace cattle-fleet-system"}, 0},
		{"tunnel down", cluster(cond(fleet.ReadyCondition, metav1.ConditionTrue, "AgentHeartbeat", "", time.Hour),
			cond(fleet.ConnectedCondition, metav1.ConditionFalse, fleet.TunnelDownReason, "No agent tunnel since T: check the pods", time.Minute)),
			[]string{"No agent tunnel since T: check the pods"}, 0},
		{"held by a replica this one does not reach", cluster(cond(fleet.ConnectedCondition, metav1.ConditionTrue, fleet.TunnelUpReason,
			"The agent's tunnel is held by fleet-proxy replica fleet-proxy-1", time.Minute)),
			[]string{"no fleet-proxy replica this one reaches", "fleet-proxy-1", "peering"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, retry := proxy.NotConnected(tc.c, now)
			for _, w := range tc.want {
				if !strings.Contains(why, w) {
					t.Errorf("%q does not say %q", why, w)
				}
			}
			if retry != tc.retry {
				t.Errorf("retry after %d, want %d", retry, tc.retry)
			}
		})
	}
}

func TestProxy_ConnectionNamedHeadersDroppedThroughTheUpstream(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	alice := newUser(t, users, "alice")
	grant(t, ws, alice.name, "c1")
	connect(t, ws+"/c1")
	h := http.Header{
		"Connection":        {"X-Secret, X-Fleet-Assertion"},
		"X-Secret":          {"s3cr3t"},
		"X-Fleet-Assertion": {"forged"},
		"X-Forwarded-For":   {"10.0.0.1"},
		"X-Remote-User":     {"system:admin"},
	}
	resp := eventuallyStatus(t, "alice reaching c1", http.StatusOK, func() *http.Response {
		return alice.do(t, http.MethodGet, clusterPath(ws, "c1", "/version"), h)
	})
	e := readEcho(t, resp)
	checkClean(t, e.Header)
	if e.Header.Get("X-Secret") != "" {
		t.Error("a header named in Connection reached the cluster")
	}
	if id := assertedUser(t, e, ws+"/c1"); id.User != alice.name {
		t.Errorf("assertion names %q, want %q", id.User, alice.name)
	}
}

// The aggregator stands in here (its client certificate) to prove
// fleet-proxy's own hygiene: what kube-apiserver would itself act on
// (Impersonate-*) never arrives through it.
func TestProxy_ImpersonationHeadersNamedInConnectionNeverReachTheCluster(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	grant(t, ws, "carol", "c1")
	connect(t, ws+"/c1")
	cert, err := env.Upstream.FrontProxyClientCertificate()
	if err != nil {
		t.Fatal(err)
	}
	c := httpClient(t, servingCA, &cert)
	var e echo
	testenv.Eventually(t, 30*time.Second, "carol reaching c1 directly", func() error {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+proxyAddr+clusterPath(ws, "c1", "/api"), nil)
		req.Header = http.Header{
			"X-Remote-User":     {"carol"},
			"X-Remote-Group":    {"team", "system:authenticated"},
			"Connection":        {"Impersonate-User"},
			"Impersonate-User":  {"admin"},
			"Impersonate-Group": {"system:masters"},
			"Authorization":     {"Bearer not-for-the-cluster"},
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			code, msg := status(t, resp)
			return fmt.Errorf("status %d: %s", code, msg)
		}
		e = readEcho(t, resp)
		return nil
	})
	checkClean(t, e.Header)
	id := assertedUser(t, e, ws+"/c1")
	if id.User != "carol" || fmt.Sprint(id.Groups) != "[team]" {
		t.Errorf("assertion names %q %v, want carol [team]", id.User, id.Groups)
	}
}

func TestProxy_DirectRequestsWithoutTheFrontProxyCertificateRefused(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	grant(t, ws, "system:admin", "c1")
	connect(t, ws+"/c1")
	admin, err := tls.X509KeyPair(env.Upstream.Config.CertData, env.Upstream.Config.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	for name, cert := range map[string]*tls.Certificate{"no client certificate": nil, "a client certificate of another CA": &admin} {
		t.Run(name, func(t *testing.T) {
			c := httpClient(t, servingCA, cert)
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+proxyAddr+clusterPath(ws, "c1", "/api"), nil)
			req.Header.Set("X-Remote-User", "system:admin")
			req.Header.Add("X-Remote-Group", "system:masters")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if code, msg := status(t, resp); code != http.StatusUnauthorized || !strings.Contains(msg, "front-proxy") {
				t.Errorf("got %d %s, want 401", code, msg)
			}
		})
	}
}

func TestProxy_WatchStreams(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	alice := newUser(t, users, "alice")
	grant(t, ws, alice.name, "c1")
	connect(t, ws+"/c1")
	eventuallyStatus(t, "alice reaching c1", http.StatusOK, func() *http.Response {
		return alice.do(t, http.MethodGet, clusterPath(ws, "c1", "/api"), nil)
	}).Body.Close()

	start := time.Now()
	resp := alice.do(t, http.MethodGet, clusterPath(ws, "c1", "/watch?watch=true"), nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	var arrivals []time.Duration
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("not an event: %q", sc.Text())
		}
		arrivals = append(arrivals, time.Since(start))
	}
	if len(arrivals) != 14 {
		t.Fatalf("got %d events, want 14", len(arrivals))
	}
	// Streamed: the first events came long before the last.
	if first, last := arrivals[0], arrivals[len(arrivals)-1]; last < 3*time.Second || last-first < 3*time.Second {
		t.Errorf("events not streamed: first after %s, last after %s", first, last)
	}
}

func TestProxy_UpgradeThroughTheUpstream(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	alice := newUser(t, users, "alice")
	grant(t, ws, alice.name, "c1")
	connect(t, ws+"/c1")
	eventuallyStatus(t, "alice reaching c1", http.StatusOK, func() *http.Response {
		return alice.do(t, http.MethodGet, clusterPath(ws, "c1", "/api"), nil)
	}).Body.Close()

	pool := alice.client.Transport.(*http.Transport).TLSClientConfig.RootCAs
	host := strings.Trim(strings.TrimPrefix(env.Upstream.Config.Host, "https://"), "/")
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", host, &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: fleet-test\r\nContent-Length: 0\r\n\r\n",
		clusterPath(ws, "c1", "/api/v1/namespaces/default/pods/p/exec?command=sh&stdout=true"), host, alice.token)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	// exec's command and streams are its query: it reaches the agent.
	if q := resp.Header.Get("X-Query"); q != "command=sh&stdout=true" {
		t.Errorf("the agent got query %q; want command=sh&stdout=true", q)
	}
	for _, line := range []string{"one", "two"} {
		fmt.Fprintf(conn, "%s\n", line)
		got, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if got != "echo "+line+"\n" {
			t.Errorf("got %q", got)
		}
	}
}

func TestServingCertificate_MadeOnceSharedByReplicas(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "tls-")
	a, caA, err := proxy.EnsureServingCertificate(t.Context(), env.Upstream.Clientset, ns, "fleet-proxy")
	if err != nil {
		t.Fatal(err)
	}
	b, caB, err := proxy.EnsureServingCertificate(t.Context(), env.Upstream.Clientset, ns, "fleet-proxy")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Certificate[0], b.Certificate[0]) || !bytes.Equal(caA, caB) {
		t.Error("a second replica made another certificate")
	}
	leaf, err := x509.ParseCertificate(a.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("fleet-proxy." + ns + ".svc"); err != nil {
		t.Error(err)
	}
	// The caBundle is written into the APIService (here the one it already
	// has, so the other tests keep working).
	dc, err := dynamic.NewForConfig(env.Upstream.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.SetAPIServiceCABundle(t.Context(), dc, servingCA); err != nil {
		t.Fatal(err)
	}
}

func TestProxy_AccessEndsWithTheRight(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	alice := newUser(t, users, "alice")
	grant(t, ws, alice.name, "c1")
	connect(t, ws+"/c1")
	eventuallyStatus(t, "alice reaching c1", http.StatusOK, func() *http.Response {
		return alice.do(t, http.MethodGet, clusterPath(ws, "c1", "/api"), nil)
	}).Body.Close()

	var rbs rbacv1.RoleBindingList
	if err := env.Upstream.Client.List(t.Context(), &rbs, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	for i := range rbs.Items {
		if err := env.Upstream.Client.Delete(t.Context(), &rbs.Items[i]); err != nil {
			t.Fatal(err)
		}
	}
	// The allowed answer is cached 10 s, no longer.
	took := testenv.Eventually(t, 20*time.Second, "alice refused after losing the right", func() (bool, error) {
		resp := alice.do(t, http.MethodGet, clusterPath(ws, "c1", "/api"), nil)
		code, _ := status(t, resp)
		return code == http.StatusForbidden, nil
	})
	if took > 12*time.Second {
		t.Errorf("access outlived the right by %s", took)
	}
}

// Open streams end with the right too: a watch and an upgraded stream
// (exec, port-forward) of a user whose binding is removed are closed, while
// another user's stream on the same cluster goes on.
func TestProxy_OpenStreamsEndWithTheRight(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	alice, bob := newUser(t, users, "alice"), newUser(t, users, "bob")
	grant(t, ws, alice.name, "c1")
	grant(t, ws, bob.name, "c1")
	connect(t, ws+"/c1")
	for _, u := range []*user{alice, bob} {
		eventuallyStatus(t, u.name+" reaching c1", http.StatusOK, func() *http.Response {
			return u.do(t, http.MethodGet, clusterPath(ws, "c1", "/api"), nil)
		}).Body.Close()
	}

	// streamEnds reads a watch until it ends and reports when.
	streamEnds := func(u *user) <-chan time.Time {
		resp := u.do(t, http.MethodGet, clusterPath(ws, "c1", "/watch-long?watch=true"), nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: watch status %d", u.name, resp.StatusCode)
		}
		ended := make(chan time.Time, 1)
		go func() {
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			ended <- time.Now()
		}()
		return ended
	}
	aliceWatch, bobWatch := streamEnds(alice), streamEnds(bob)
	aliceExec := upgrade(t, alice, clusterPath(ws, "c1", "/api/v1/namespaces/default/pods/p/exec"))
	defer aliceExec.Close()
	execEnded := make(chan time.Time, 1)
	go func() {
		br := bufio.NewReader(aliceExec)
		for {
			if _, err := fmt.Fprintf(aliceExec, "ping\n"); err != nil {
				break
			}
			if _, err := br.ReadString('\n'); err != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		execEnded <- time.Now()
	}()

	// Only alice's binding goes.
	var rbs rbacv1.RoleBindingList
	if err := env.Upstream.Client.List(t.Context(), &rbs, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	for i := range rbs.Items {
		if rbs.Items[i].Subjects[0].Name == alice.name {
			if err := env.Upstream.Client.Delete(t.Context(), &rbs.Items[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	revoked := time.Now()
	// The allowed answer is cached 10 s; the stream is checked every
	// second here (15 s by default).
	for what, ended := range map[string]<-chan time.Time{"watch": aliceWatch, "exec": execEnded} {
		select {
		case at := <-ended:
			t.Logf("alice's %s ended %s after her binding was removed", what, at.Sub(revoked).Round(100*time.Millisecond))
		case <-time.After(30 * time.Second):
			t.Errorf("alice's %s still open 30s after her binding was removed", what)
		}
	}
	select {
	case at := <-bobWatch:
		t.Errorf("bob's watch ended %s after alice's binding was removed; bob still has the right", at.Sub(revoked))
	default:
	}
}

// upgrade opens an upgraded stream (the backend echoes lines) through the
// upstream API server as u.
func upgrade(t *testing.T, u *user, path string) net.Conn {
	t.Helper()
	pool := u.client.Transport.(*http.Transport).TLSClientConfig.RootCAs
	host := strings.Trim(strings.TrimPrefix(env.Upstream.Config.Host, "https://"), "/")
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", host, &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: fleet-test\r\nContent-Length: 0\r\n\r\n", path, host, u.token)
	// Read the 101 byte by byte: what follows belongs to the stream.
	var head []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if _, err := conn.Read(one); err != nil {
			t.Fatalf("reading the upgrade response: %v (%q)", err, head)
		}
		head = append(head, one[0])
	}
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 101")) {
		t.Fatalf("upgrade: %q", head)
	}
	return conn
}

func TestMetrics_ProxiedRequestsCounted(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	alice := newUser(t, users, "alice")
	grant(t, ws, alice.name, "c1")
	connect(t, ws+"/c1")
	eventuallyStatus(t, "alice reaching c1", http.StatusOK, func() *http.Response {
		return alice.do(t, http.MethodGet, clusterPath(ws, "c1", "/api"), nil)
	}).Body.Close()
	// The metrics are recorded once the handler returns, which may be
	// after the client read the whole answer.
	testenv.Eventually(t, 10*time.Second, "the request's metrics", func() error {
		families, err := crmetrics.Registry.Gather()
		if err != nil {
			return err
		}
		found := map[string]bool{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["cluster"] == ws+"/c1" {
					found[f.GetName()] = true
					if f.GetName() == "fleet_proxy_requests_total" && labels["code"] != "200" {
						t.Errorf("code %q", labels["code"])
					}
				}
			}
		}
		for _, n := range []string{"fleet_proxy_requests_total", "fleet_proxy_request_duration_seconds", "fleet_proxy_response_bytes_total"} {
			if !found[n] {
				return fmt.Errorf("no %s for %s/c1", n, ws)
			}
		}
		return nil
	})
}

// TestAttach_NotAnAgentRefused: a caller with the upstream right to attach to
// a Cluster that is no agent's request identity gets fleet-proxy's 403, and
// holds no session (test/access refuses another Cluster's agent too).
func TestAttach_NotAnAgentRefused(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "att-")
	u := newUser(t, ns, "agent")
	// What the registration grant gives an agent: get on its Cluster's attach.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "attach"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{proxy.Group}, Resources: []string{"clusters/attach"},
			ResourceNames: []string{"c1"}, Verbs: []string{"get"}}},
	}
	if err := env.Upstream.Client.Create(t.Context(), role); err != nil {
		t.Fatal(err)
	}
	if err := env.Upstream.Client.Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "attach"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "attach"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "agent"}},
	}); err != nil {
		t.Fatal(err)
	}
	eventuallyRefused(t, "attach refused by fleet-proxy", http.StatusForbidden, "this identity may not hold the tunnel of this cluster", func() *http.Response {
		return u.do(t, http.MethodGet, "/apis/"+proxy.GroupVersion+"/namespaces/"+ns+"/clusters/c1/attach", nil)
	})
	if fleetProxy.Tunnels().Server.HasSession(ns + "/c1") {
		t.Error("a caller that is no agent holds a session")
	}
}

// Inbound impersonation (kubectl --as) is the upstream API server's: without
// the upstream impersonate right it is refused there; with it, fleet-proxy
// serves the impersonated identity and no Impersonate-* header goes on.
func TestProxy_ImpersonationIsDecidedUpstream(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	alice, bob := newUser(t, users, "alice"), newUser(t, users, "bob")
	grant(t, ws, alice.name, "c1")
	grant(t, ws, "dave", "c1")
	connect(t, ws+"/c1")
	as := http.Header{"Impersonate-User": {"dave"}}

	code, msg := status(t, alice.do(t, http.MethodGet, clusterPath(ws, "c1", "/api"), as))
	if code != http.StatusForbidden || !strings.Contains(msg, "impersonate") {
		t.Errorf("--as without the upstream right: %d %s", code, msg)
	}

	c := env.Upstream.Client
	// Impersonating users is a cluster-wide right.
	if err := c.Create(t.Context(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "impersonate-dave-" + users},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: []string{"dave"}, Verbs: []string{"impersonate"}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "impersonate-dave-" + users},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "impersonate-dave-" + users},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: users, Name: "bob"}},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Delete(t.Context(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "impersonate-dave-" + users}})
		_ = c.Delete(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "impersonate-dave-" + users}})
	})
	e := readEcho(t, eventuallyStatus(t, "bob --as dave reaching c1", http.StatusOK, func() *http.Response {
		return bob.do(t, http.MethodGet, clusterPath(ws, "c1", "/api"), as)
	}))
	checkClean(t, e.Header)
	if id := assertedUser(t, e, ws+"/c1"); id.User != "dave" {
		t.Errorf("assertion names %q, want dave", id.User)
	}
}

// Runs last (go test runs tests in source order): no user token made by
// the tests appears in the log.
func TestZZ_NoTokenInTheLogs(t *testing.T) {
	tokensMu.Lock()
	defer tokensMu.Unlock()
	out := logs.String()
	for _, tok := range tokens {
		if strings.Contains(out, tok) {
			t.Fatal("a user's token is in the log")
		}
	}
	if len(tokens) == 0 {
		t.Fatal("no tokens were made")
	}
}

// TestTunnelServer_RefusesWithoutSessionOrIdentity: the adapter of the
// tunnel server gives no dialer for a cluster without a session and
// refuses an attach whose caller maps to no Cluster (test/access runs it
// end to end).
func TestTunnelServer_RefusesWithoutSessionOrIdentity(t *testing.T) {
	ts, err := proxy.NewTunnelServer(env.Upstream.Client, proxy.TunnelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ts.Dialer("fleet-default/nowhere"); ok {
		t.Error("a dialer for a cluster without a session")
	}
	for name, u := range map[string]authnuser.Info{
		"no user":             nil,
		"not an agent":        &authnuser.DefaultInfo{Name: "alice"},
		"unknown agent":       &authnuser.DefaultInfo{Name: "system:serviceaccount:cluster-x:request-y"},
		"malformed key below": &authnuser.DefaultInfo{Name: "system:serviceaccount:cluster-x:request-y"},
	} {
		key := "fleet-default/nowhere"
		if name == "malformed key below" {
			key = "fleet-default/a/b"
		}
		req := httptest.NewRequest(http.MethodGet, tunnel.AttachPath("fleet-default", "nowhere"), nil)
		rec := httptest.NewRecorder()
		ts.ServeAttach(rec, req, key, u)
		if rec.Code != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", name, rec.Code)
		}
		if ts.Server.HasSession(key) {
			t.Errorf("%s: a session", name)
		}
	}
}
