package access_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/direct"
	"github.com/gitops-fleet/fleet/proxy"
)

// directCluster is a Cluster with a direct endpoint served by an agent
// played by the test (startDirectAgent).
func directCluster(t *testing.T, cluster string) *directAgent {
	t.Helper()
	agent := startDirectAgent(t, cluster, agentIdentity(t, cluster, "reg-"+cluster, cluster))
	enableDirect(t, cluster, agent.srv.URL, certPEM(agent.srv))
	return agent
}

// reaches says whether token gets through the agent's direct endpoint (a
// discovery request every authenticated user may make downstream): nil, or
// the refusal.
func (d *directAgent) reaches(t *testing.T, token string) error {
	t.Helper()
	_, err := d.client(t, token).Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("%s", statusOf(err))
	}
	return nil
}

// waitRefused waits (bounded) until token is refused (401) by the direct
// endpoint, and returns how long that took.
func (d *directAgent) waitRefused(t *testing.T, what, token string) time.Duration {
	t.Helper()
	start := time.Now()
	testenv.Eventually(t, 60*time.Second, what, func() error {
		_, err := d.client(t, token).Discovery().ServerVersion()
		if apierrors.IsUnauthorized(err) {
			return nil
		}
		return fmt.Errorf("still %s", statusOf(err))
	})
	return time.Since(start).Round(100 * time.Millisecond)
}

// jwtExp reads the exp claim of a JWT (unverified).
func jwtExp(t *testing.T, tok string) time.Time {
	t.Helper()
	var c struct {
		Exp int64 `json:"exp"`
	}
	jwtClaims(t, tok, &c)
	return time.Unix(c.Exp, 0)
}

// jwtClaims decodes the claims of a compact JWS into c (unverified).
func jwtClaims(t *testing.T, tok string, c any) {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWS: %d parts", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	must(t, err)
	must(t, json.Unmarshal(b, c))
}

// rawTokenRequest posts body as a token request for cluster through the
// upstream API server with cfg, as it is (no credential added).
func rawTokenRequest(t *testing.T, cfg *rest.Config, cluster, body string) (*http.Response, []byte) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	must(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, strings.TrimSuffix(cfg.Host, "/")+proxyv1.TokenPath(workspace, cluster), strings.NewReader(body))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp, b
}

// TestDirectToken_DiesWithItsServiceAccount (issue 27 finding 2): the
// direct token of a ServiceAccount is revoked once the ServiceAccount is
// deleted, and once it is deleted and made again under the same name (the
// same RoleBinding then grants the new one clusters/proxy: only the UID
// tells them apart); the new ServiceAccount gets a token of its own.
func TestDirectToken_DiesWithItsServiceAccount(t *testing.T) {
	ctx := t.Context()
	up := env.Upstream
	const cluster = "direct-sa"
	agent := directCluster(t, cluster)
	ciName, _, ciTok := upstreamUser(t, "sa-users", "ci", cluster)
	ci2Name, _, ci2Tok := upstreamUser(t, "sa-users", "ci2", cluster)
	grantProxy(t, "sa-ci", ciName, cluster, "get")
	grantProxy(t, "sa-ci2", ci2Name, cluster, "get")

	ciResp, err := tokenRequest(t, ciTok, cluster, 0)
	must(t, err)
	ci2Resp, err := tokenRequest(t, ci2Tok, cluster, 0)
	must(t, err)
	for name, tok := range map[string]string{"ci": ciResp.Status.Token, "ci2": ci2Resp.Status.Token} {
		if err := agent.reaches(t, tok); err != nil {
			t.Fatalf("%s's direct token before: %v", name, err)
		}
	}

	// Deleted: its own token gets 401 upstream, and the direct token dies.
	must(t, up.Client.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "sa-users", Name: "ci"}}))
	took := agent.waitRefused(t, "ci's direct token refused after its ServiceAccount was deleted", ciResp.Status.Token)
	t.Logf("ci's direct token refused %s after its ServiceAccount was deleted", took)

	// Deleted and made again: the RoleBinding grants the new one, the old
	// token dies all the same.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "sa-users", Name: "ci2"}}
	must(t, up.Client.Delete(ctx, sa))
	sa = &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "sa-users", Name: "ci2"}}
	must(t, up.Client.Create(ctx, sa))
	took = agent.waitRefused(t, "ci2's direct token refused after its ServiceAccount was made again", ci2Resp.Status.Token)
	t.Logf("ci2's direct token refused %s after its ServiceAccount was deleted and made again", took)
	newTok, err := up.ServiceAccountToken(ctx, "sa-users", "ci2", time.Hour)
	must(t, err)
	again, err := tokenRequest(t, newTok, cluster, 0)
	must(t, err)
	testenv.Eventually(t, 10*time.Second, "the new ci2's direct token works", func() error { return agent.reaches(t, again.Status.Token) })
	// And stays: the recheck does not confuse it with the old one.
	time.Sleep(2 * time.Second)
	if err := agent.reaches(t, again.Status.Token); err != nil {
		t.Errorf("the new ci2's token after a few rechecks: %v", err)
	}
}

// TestDirectToken_DiesWithTheBoundPod (issue 27 finding 2): a direct token
// asked with a ServiceAccount token bound to a pod is revoked once the pod
// is gone, though the ServiceAccount and its right stay.
func TestDirectToken_DiesWithTheBoundPod(t *testing.T) {
	ctx := t.Context()
	up := env.Upstream
	const cluster = "direct-pod"
	agent := directCluster(t, cluster)
	ns := testenv.Namespace(t, up.Client, "pod-users-")
	must(t, up.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runner"}}))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runner"},
		Spec: corev1.PodSpec{ServiceAccountName: "runner", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "runner", Image: "registry.example/runner:1"}}}}
	must(t, up.Client.Create(ctx, pod))
	grantProxy(t, "pod-runner", "system:serviceaccount:"+ns+":runner", cluster, "get")
	tr, err := up.Clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "runner", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(3600)),
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	must(t, err)
	resp, err := tokenRequest(t, tr.Status.Token, cluster, 0)
	must(t, err)
	if err := agent.reaches(t, resp.Status.Token); err != nil {
		t.Fatalf("the pod's direct token before: %v", err)
	}
	must(t, up.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)))
	took := agent.waitRefused(t, "the direct token refused after its bound pod went", resp.Status.Token)
	t.Logf("the direct token refused %s after the pod its credential was bound to was deleted", took)
}

// TestDirectToken_LivesNoLongerThanItsCredential (issue 27 finding 2): a
// token asked with a 10-minute ServiceAccount token expires with it (and
// is refused by an agent once it has), whatever was asked; a request that
// shows no credential, or another user's, gets at most the unverified
// maximum (15 minutes) and says so; a client certificate is recognized; a
// malformed credential is refused.
func TestDirectToken_LivesNoLongerThanItsCredential(t *testing.T) {
	ctx := t.Context()
	up := env.Upstream
	const cluster = "direct-lifetime"
	agent := directCluster(t, cluster)
	shortName, _, _ := upstreamUser(t, "lifetime-users", "short", cluster)
	_, _, otherTok := upstreamUser(t, "lifetime-users", "other", cluster)
	grantProxy(t, "lifetime-short", shortName, cluster, "get")
	shortTok, err := up.ServiceAccountToken(ctx, "lifetime-users", "short", 10*time.Minute)
	must(t, err)
	credExp := jwtExp(t, shortTok)

	// fleet kubeconfig's request: 8 h asked, the credential's end given.
	resp, err := tokenRequest(t, shortTok, cluster, int64((8 * time.Hour).Seconds()))
	must(t, err)
	exp := resp.Status.ExpirationTimestamp
	if exp.After(credExp.Add(-assertion.Skew)) || exp.Before(credExp.Add(-assertion.Skew-5*time.Second)) || resp.Status.LimitedBy != proxyv1.LimitedByCredential {
		t.Errorf("a token asked with a credential expiring at %s: expires %s, limited by %q; want the credential's end less %s",
			credExp, exp, resp.Status.LimitedBy, assertion.Skew)
	}
	if err := agent.reaches(t, resp.Status.Token); err != nil {
		t.Fatalf("the short token now: %v", err)
	}
	// Past the credential's end (the agent's clock moved on), refused.
	v := assertion.NewVerifier(agent.h.Keys())
	if _, err := v.VerifyDirect(resp.Status.Token, workspace+"/"+cluster, credExp); err == nil {
		t.Errorf("the direct token is still valid when the credential it was asked with expires (%s)", credExp)
	}

	// No credential shown: at most 15 minutes, with a warning.
	body := `{"kind":"DirectTokenRequest","apiVersion":"proxy.fleet.cattle.io/v1alpha1","spec":{"expirationSeconds":3600}}`
	raw, b := rawTokenRequest(t, up.ConfigForToken(shortTok), cluster, body)
	var unproven proxyv1.DirectToken
	must(t, json.Unmarshal(b, &unproven))
	if raw.StatusCode != http.StatusCreated || unproven.Status.LimitedBy != proxyv1.LimitedByUnverifiedCredential ||
		unproven.Status.ExpirationTimestamp.After(time.Now().Add(proxy.DefaultDirectUnverifiedLifetime)) ||
		!strings.Contains(raw.Header.Get("Warning"), "lifetime is unknown") {
		t.Errorf("a request without its credential: %d, expires %s, limited by %q, warning %q", raw.StatusCode,
			unproven.Status.ExpirationTimestamp, unproven.Status.LimitedBy, raw.Header.Get("Warning"))
	}
	// Another user's credential proves nothing about this one's.
	body = fmt.Sprintf(`{"kind":"DirectTokenRequest","apiVersion":"proxy.fleet.cattle.io/v1alpha1","spec":{"expirationSeconds":3600,"credential":{"token":%q}}}`, otherTok)
	raw, b = rawTokenRequest(t, up.ConfigForToken(shortTok), cluster, body)
	var other proxyv1.DirectToken
	must(t, json.Unmarshal(b, &other))
	if raw.StatusCode != http.StatusCreated || other.Status.LimitedBy != proxyv1.LimitedByUnverifiedCredential ||
		!strings.Contains(raw.Header.Get("Warning"), "authenticates as") {
		t.Errorf("a request with another user's token as its credential: %d, limited by %q, warning %q", raw.StatusCode, other.Status.LimitedBy, raw.Header.Get("Warning"))
	}
	// A malformed one is refused.
	body = `{"kind":"DirectTokenRequest","apiVersion":"proxy.fleet.cattle.io/v1alpha1","spec":{"credential":{"clientCertificate":"not a certificate"}}}`
	if raw, b = rawTokenRequest(t, up.ConfigForToken(shortTok), cluster, body); raw.StatusCode != http.StatusBadRequest {
		t.Errorf("a malformed credential: %d %s", raw.StatusCode, b)
	}
	for name, tok := range map[string]string{"short": shortTok, "other": otherTok} {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("the credential of %s shown to fleet-proxy is in the log", name)
		}
	}
	cms := &corev1.ConfigMapList{}
	must(t, up.Client.List(ctx, cms, client.InNamespace(proxyNamespace)))
	for _, cm := range cms.Items {
		for _, v := range cm.Data {
			if strings.Contains(v, strings.Split(shortTok, ".")[2]) {
				t.Errorf("ConfigMap %s holds the credential shown", cm.Name)
			}
		}
	}

	// A client certificate user (the control plane's admin): its
	// certificate is recognized, the hour asked is given.
	cert, err := tokenRequestAs(t, up.Config, cluster, time.Hour)
	must(t, err)
	if cert.Status.LimitedBy == proxyv1.LimitedByUnverifiedCredential {
		t.Errorf("a client certificate user's token is limited as unverified (expires %s)", cert.Status.ExpirationTimestamp)
	}
}

// tokenRequestAs asks for a direct token as cfg's user, as fleet kubeconfig
// does.
func tokenRequestAs(t *testing.T, cfg *rest.Config, cluster string, ttl time.Duration) (*proxyv1.DirectToken, error) {
	t.Helper()
	return direct.RequestToken(t.Context(), cfg, workspace, cluster, ttl)
}

// TestDirectToken_QuotaRevokesTheOldest (issue 27 finding 4): a user holds
// at most 10 live tokens of a Cluster: the 11th revokes the oldest, the
// other ten keep working.
func TestDirectToken_QuotaRevokesTheOldest(t *testing.T) {
	const cluster = "direct-quota"
	agent := directCluster(t, cluster)
	name, _, tok := upstreamUser(t, "quota-users", "busy", cluster)
	grantProxy(t, "quota-busy", name, cluster, "get")
	var tokens []string
	for i := range proxy.DefaultDirectTokensPerUser + 1 {
		resp, err := tokenRequest(t, tok, cluster, 0)
		if err != nil {
			t.Fatalf("token %d: %s", i+1, statusOf(err))
		}
		tokens = append(tokens, resp.Status.Token)
	}
	took := agent.waitRefused(t, "the oldest token refused once the 11th was issued", tokens[0])
	t.Logf("the oldest token refused %s after the 11th was issued", took)
	for i, tok := range tokens[1:] {
		if err := agent.reaches(t, tok); err != nil {
			t.Errorf("token %d of the 10 newest: %v", i+2, err)
		}
	}
}

// TestDirectToken_IssueRateLimited (issue 27 finding 4): a user gets at most
// 20 tokens of a Cluster an hour; the 21st request is refused with 429 and
// a Retry-After, and another user is not affected.
func TestDirectToken_IssueRateLimited(t *testing.T) {
	const cluster = "direct-rate"
	directCluster(t, cluster)
	name, _, tok := upstreamUser(t, "rate-users", "eager", cluster)
	calmName, _, calmTok := upstreamUser(t, "rate-users", "calm", cluster)
	grantProxy(t, "rate-eager", name, cluster, "get")
	grantProxy(t, "rate-calm", calmName, cluster, "get")
	for i := range proxy.DefaultDirectIssueLimit {
		if _, err := tokenRequest(t, tok, cluster, 0); err != nil {
			t.Fatalf("token %d: %s", i+1, statusOf(err))
		}
	}
	body := `{"kind":"DirectTokenRequest","apiVersion":"proxy.fleet.cattle.io/v1alpha1","spec":{}}`
	raw, b := rawTokenRequest(t, env.Upstream.ConfigForToken(tok), cluster, body)
	retry, _ := strconv.Atoi(raw.Header.Get("Retry-After"))
	if raw.StatusCode != http.StatusTooManyRequests || retry <= 0 || retry > 3600 || !bytes.Contains(b, []byte("ask again after")) {
		t.Errorf("the 21st request in an hour: %d, Retry-After %q: %s", raw.StatusCode, raw.Header.Get("Retry-After"), b)
	}
	if _, err := tokenRequest(t, calmTok, cluster, 0); err != nil {
		t.Errorf("another user after the first was limited: %s", statusOf(err))
	}
}

// upgradeDirect sends an exec/attach/port-forward upgrade (proto SPDY/3.1 as
// POST, websocket as GET) to the direct endpoint with token, and returns the
// status and body of the answer.
func (d *directAgent) upgradeDirect(t *testing.T, token, path, proto string) (int, string) {
	t.Helper()
	pool, err := certutil.NewPoolFromBytes(certPEM(d.srv))
	must(t, err)
	host := strings.TrimPrefix(d.srv.URL, "https://")
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", host, &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
	must(t, err)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	method, extra := http.MethodPost, "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n"
	if proto == "websocket" {
		method, extra = http.MethodGet, "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n"
	}
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n%s\r\n", method, path, host, token, proto, extra)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

// TestDirectEndpoint_StreamsNeedCreate (issue 27 finding 6): through the
// direct endpoint, a token with get only cannot exec, attach or
// port-forward (SPDY or WebSocket) even where the downstream RBAC would let
// the user; a token with create reaches the downstream API server, which
// decides (here: no such pod).
func TestDirectEndpoint_StreamsNeedCreate(t *testing.T) {
	ctx := t.Context()
	down := env.Downstreams[0]
	const cluster = "direct-streams"
	agent := directCluster(t, cluster)
	readerName, _, readerTok := upstreamUser(t, "streams-users", "reader", cluster)
	operatorName, _, operatorTok := upstreamUser(t, "streams-users", "operator", cluster)
	grantProxy(t, "streams-reader", readerName, cluster, "get")
	grantProxy(t, "streams-operator", operatorName, cluster, "get", "create")
	// Downstream, both may exec, attach and port-forward in namespace streams.
	must(t, down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "streams"}}))
	must(t, down.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "streams", Name: "debug"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/exec", "pods/attach", "pods/portforward"}, Verbs: []string{"get", "list", "create"}}}}))
	must(t, down.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "streams", Name: "debug"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "debug"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "fleet:" + readerName},
			{APIGroup: rbacv1.GroupName, Kind: "User", Name: "fleet:" + operatorName}}}))
	reader, err := tokenRequest(t, readerTok, cluster, 0)
	must(t, err)
	operator, err := tokenRequest(t, operatorTok, cluster, 0)
	must(t, err)
	if strings.Join(reader.Status.Verbs, ",") != "get" || strings.Join(operator.Status.Verbs, ",") != "create,get" {
		t.Fatalf("verbs: reader %v, operator %v", reader.Status.Verbs, operator.Status.Verbs)
	}
	for _, sub := range []string{"exec?command=sh&stdin=true&stdout=true", "attach?stdin=true&stdout=true", "portforward?ports=8080"} {
		path := "/api/v1/namespaces/streams/pods/web/" + sub
		for _, proto := range []string{"SPDY/3.1", "websocket"} {
			if code, body := agent.upgradeDirect(t, reader.Status.Token, path, proto); code != http.StatusForbidden || !strings.Contains(body, "carries the verbs [get]") {
				t.Errorf("%s over %s with a get-only token: want the agent's 403, got %d %s", sub, proto, code, body)
			}
			if code, body := agent.upgradeDirect(t, operator.Status.Token, path, proto); code != http.StatusNotFound || !strings.Contains(body, `pods \"web\" not found`) {
				t.Errorf("%s over %s with create: want the downstream's 404 for the missing pod, got %d %s", sub, proto, code, body)
			}
		}
	}
	// Reading still works with get only.
	if _, err := agent.client(t, reader.Status.Token).CoreV1().Pods("streams").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("reader lists pods: %s", statusOf(err))
	}
}
