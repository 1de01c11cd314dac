package access_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/agent/access"
	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/direct"
	"github.com/gitops-fleet/fleet/proxy"
)

// directAgent is an agent's direct endpoint as agent.serveDirect wires it:
// the access handler in direct mode over TLS, its keys read through the
// upstream as the agent, and its revocation list kept in step by a loop.
type directAgent struct {
	srv *httptest.Server
	h   *access.Handler
	rev *access.Revocations
}

func startDirectAgent(t *testing.T, cluster, agentToken string) *directAgent {
	t.Helper()
	return startDirectAgentWith(t, cluster, agentToken, nil)
}

// startDirectAgentWith starts the endpoint whose token webhook answers for
// apiAudiences.
func startDirectAgentWith(t *testing.T, cluster, agentToken string, apiAudiences []string) *directAgent {
	t.Helper()
	up := &rest.Config{Host: env.Upstream.Config.Host, BearerToken: agentToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.Upstream.Config.CAData}}
	keysFn, err := access.UpstreamKeys(up)
	must(t, err)
	revFn, err := access.UpstreamRevocations(up, workspace, cluster)
	must(t, err)
	var ks *assertion.KeySet
	testenv.Eventually(t, 30*time.Second, "the signing keys through the upstream, as the agent", func() error {
		ks, err = keysFn(t.Context())
		return err
	})
	h, err := access.New(access.Options{Audience: workspace + "/" + cluster, Verifier: assertion.NewVerifier(ks),
		RefreshKeys: keysFn, Local: rest.CopyConfig(env.Downstreams[0].Config), Direct: true, APIAudiences: apiAudiences})
	must(t, err)
	rev := access.NewRevocations()
	mux := http.NewServeMux()
	mux.Handle(direct.AuthenticatePath, h.ServeTokenReview(rev))
	mux.Handle("/", h.ServeDirect(rev))
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		etag := ""
		for ctx.Err() == nil {
			if list, tag, err := revFn(ctx, etag); err == nil && list != nil {
				etag = tag
				rev.Set(list, time.Now())
			}
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	return &directAgent{srv: srv, h: h, rev: rev}
}

// client is a clientset for the endpoint with a bearer token, trusting the
// endpoint's CA.
func (d *directAgent) client(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: d.srv.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: certPEM(d.srv)}}
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	return cs
}

// tokenRequest asks fleet-proxy, through the upstream API server, for a
// direct token for cluster as the upstream user of userToken.
func tokenRequest(t *testing.T, userToken, cluster string, seconds int64) (*proxyv1.DirectToken, error) {
	t.Helper()
	return direct.RequestToken(t.Context(), env.Upstream.ConfigForToken(userToken), workspace, cluster, time.Duration(seconds)*time.Second)
}

func grantProxy(t *testing.T, name, user, cluster string, verbs ...string) {
	t.Helper()
	ctx := t.Context()
	must(t, env.Upstream.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters/proxy"},
			ResourceNames: []string{cluster}, Verbs: verbs}},
	}))
	must(t, env.Upstream.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	}))
}

// enableDirect gives the Cluster a direct endpoint at url and reports
// caPEM as its CA, as its agent would.
func enableDirect(t *testing.T, cluster, url string, caPEM []byte) {
	t.Helper()
	c := &fleet.Cluster{}
	must(t, env.Upstream.Client.Get(t.Context(), client.ObjectKey{Namespace: workspace, Name: cluster}, c))
	c.Spec.AgentDirectEndpoint = &fleet.DirectEndpointSpec{URL: url}
	must(t, env.Upstream.Client.Update(t.Context(), c))
	c.Status.Agent.DirectEndpointCA = string(caPEM)
	must(t, env.Upstream.Client.Status().Update(t.Context(), c))
	// fleet-proxy reads Clusters from its cache.
	testenv.Eventually(t, 10*time.Second, "the direct endpoint in fleet-proxy's cache", func() error {
		_, err := tunnels.DirectEndpoint(t.Context(), workspace, cluster)
		return err
	})
}

func certPEM(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// signingKey is fleet-proxy's private key, which the test gave it (to make
// tokens fleet-proxy would never issue: an expired one). fleet-proxy keeps
// it in memory only.
func signingKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	return proxyKey
}

// TestDirectEndpoint: a user with clusters/proxy on a Cluster gets a direct
// token through the upstream API server and reaches the cluster through the
// agent's direct endpoint as the same downstream identity as through the
// proxy, with exactly the verbs held upstream; every other token is refused,
// and removing the upstream right revokes the token within seconds.
func TestDirectEndpoint(t *testing.T) {
	ctx := t.Context()
	up, down := env.Upstream, env.Downstreams[0]
	const clusterD, clusterE = "direct-d", "direct-e"
	agentD := agentIdentity(t, clusterD, "reg-direct-d", clusterD)
	agentE := agentIdentity(t, clusterE, "reg-direct-e", clusterE)
	aliceName, _, aliceTok := upstreamUser(t, "direct-users", "alice", clusterD)
	bobName, _, bobTok := upstreamUser(t, "direct-users", "bob", clusterD)
	_, _, malloryTok := upstreamUser(t, "direct-users", "mallory", clusterD)
	all := []string{"get", "create", "update", "patch", "delete"}
	grantProxy(t, "direct-alice", aliceName, clusterD, all...)
	grantProxy(t, "direct-alice-e", aliceName, clusterE, all...)
	grantProxy(t, "direct-bob", bobName, clusterD, "get")

	// A Cluster without a direct endpoint: a clear refusal.
	if _, err := tokenRequest(t, aliceTok, clusterD, 0); apierrors.ReasonForError(err) != proxyv1.NoDirectEndpointReason || !strings.Contains(err.Error(), "spec.agentDirectEndpoint") {
		t.Fatalf("a token for a Cluster without a direct endpoint: want 400 naming spec.agentDirectEndpoint, got %s", statusOf(err))
	}

	// Downstream: fleet:<alice> and fleet:<bob> may read and delete
	// ConfigMaps in direct-a, nothing in direct-b.
	for _, ns := range []string{"direct-a", "direct-b"} {
		must(t, down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		must(t, down.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "marker"}}))
	}
	must(t, down.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "direct-a", Name: "cm-editor"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "delete"}}},
	}))
	must(t, down.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "direct-a", Name: "cm-editor"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cm-editor"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "fleet:" + aliceName},
			{APIGroup: rbacv1.GroupName, Kind: "User", Name: "fleet:" + bobName}},
	}))

	agent := startDirectAgent(t, clusterD, agentD)
	enableDirect(t, clusterD, agent.srv.URL, certPEM(agent.srv))
	enableDirect(t, clusterE, "https://direct-e.example:30443", certPEM(agent.srv))

	// Alice: all verbs; as fleet:<alice> downstream.
	aliceResp, err := tokenRequest(t, aliceTok, clusterD, 0)
	must(t, err)
	if got := aliceResp.Status.ExpirationTimestamp.Sub(time.Now()); got < 55*time.Minute || got > 61*time.Minute {
		t.Errorf("default lifetime: expires in %s, want one hour", got)
	}
	if strings.Join(aliceResp.Status.Verbs, ",") != "create,delete,get,patch,update" {
		t.Errorf("alice's token carries %v, want every verb", aliceResp.Status.Verbs)
	}
	if ep := aliceResp.Status.Endpoint; ep.URL != agent.srv.URL || ep.CABundle != string(certPEM(agent.srv)) {
		t.Errorf("the token's endpoint %+v, want the Cluster's url and reported CA", ep)
	}
	alice := agent.client(t, aliceResp.Status.Token)
	if _, err := alice.CoreV1().ConfigMaps("direct-a").Get(ctx, "marker", metav1.GetOptions{}); err != nil {
		t.Fatalf("alice reads direct-a through the direct endpoint: %s", statusOf(err))
	}
	_, err = alice.CoreV1().ConfigMaps("direct-b").Get(ctx, "marker", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `"fleet:`+aliceName+`"`) {
		t.Errorf("alice in direct-b: want the downstream 403 naming fleet:%s, got %s", aliceName, statusOf(err))
	}
	// Impersonation through the endpoint is refused.
	asAdmin := rest.CopyConfig(&rest.Config{Host: agent.srv.URL, BearerToken: aliceResp.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: certPEM(agent.srv)}})
	asAdmin.Impersonate = rest.ImpersonationConfig{UserName: "admin", Groups: []string{"system:masters"}}
	adminCS, err := kubernetes.NewForConfig(asAdmin)
	must(t, err)
	if _, err := adminCS.CoreV1().ConfigMaps("direct-b").Get(ctx, "marker", metav1.GetOptions{}); !apierrors.IsBadRequest(err) {
		t.Errorf("--as through the direct endpoint: want 400, got %s", statusOf(err))
	}

	// Bob: get only, as upstream; his delete is refused by the agent even
	// though downstream RBAC would allow it.
	bobResp, err := tokenRequest(t, bobTok, clusterD, 600)
	must(t, err)
	if strings.Join(bobResp.Status.Verbs, ",") != "get" {
		t.Fatalf("bob's token carries %v, want [get]", bobResp.Status.Verbs)
	}
	bob := agent.client(t, bobResp.Status.Token)
	if _, err := bob.CoreV1().ConfigMaps("direct-a").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("bob lists direct-a: %s", statusOf(err))
	}
	err = bob.CoreV1().ConfigMaps("direct-a").Delete(ctx, "marker", metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "not delete") {
		t.Errorf("bob deletes with a get-only token: want the agent's 403, got %s", statusOf(err))
	}

	// Refusals at issue: no right, a lifetime too long, a bad body.
	if _, err := tokenRequest(t, malloryTok, clusterD, 0); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "clusters/proxy") {
		t.Errorf("mallory (no right): want fleet-proxy's 403, got %s", statusOf(err))
	}
	if _, err := tokenRequest(t, aliceTok, clusterD, int64((25 * time.Hour).Seconds())); !apierrors.IsBadRequest(err) {
		t.Errorf("a 25 h token: want 400, got %s", statusOf(err))
	}

	// Refusals at the endpoint, each a 401.
	eResp, err := tokenRequest(t, aliceTok, clusterE, 0)
	must(t, err)
	forger, err := assertion.NewSigner(func() ed25519.PrivateKey { _, k, _ := ed25519.GenerateKey(rand.Reader); return k }(), 0)
	must(t, err)
	forged, _, err := forger.SignDirect(assertion.Identity{User: aliceName}, workspace+"/"+clusterD, assertion.DirectVerbs, time.Now(), time.Hour)
	must(t, err)
	real, err := assertion.NewSigner(signingKey(t), 0)
	must(t, err)
	expired, _, err := real.SignDirect(assertion.Identity{User: aliceName}, workspace+"/"+clusterD, assertion.DirectVerbs, time.Now().Add(-2*time.Hour), time.Hour)
	must(t, err)
	proxyAssertion, err := real.Sign(assertion.Identity{User: aliceName}, workspace+"/"+clusterD, time.Now())
	must(t, err)
	for name, tok := range map[string]string{
		"a token for another cluster": eResp.Status.Token,
		"a forged token":              forged,
		"an expired token":            expired,
		"fleet-proxy's assertion":     proxyAssertion,
		"an upstream token":           aliceTok,
		"no token":                    "",
	} {
		_, err := agent.client(t, tok).CoreV1().ConfigMaps("direct-a").List(ctx, metav1.ListOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("%s: want 401, got %s", name, statusOf(err))
		}
	}

	// The token webhook (mode webhook) says the same.
	review := func(tok string) authnv1.TokenReviewStatus {
		body, _ := json.Marshal(authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: tok}})
		resp, err := agent.srv.Client().Post(agent.srv.URL+direct.AuthenticatePath, "application/json", strings.NewReader(string(body)))
		must(t, err)
		defer resp.Body.Close()
		var out authnv1.TokenReview
		must(t, json.NewDecoder(resp.Body).Decode(&out))
		return out.Status
	}
	if st := review(aliceResp.Status.Token); !st.Authenticated || st.User.Username != "fleet:"+aliceName {
		t.Errorf("token webhook, alice: %+v", st)
	}
	for name, tok := range map[string]string{"bob's get-only token": bobResp.Status.Token, "a forged token": forged, "another cluster's": eResp.Status.Token} {
		if st := review(tok); st.Authenticated {
			t.Errorf("token webhook authenticated %s as %+v", name, st.User)
		}
	}

	// The revocation list: only this Cluster's agent reads it.
	otherAgent, err := access.UpstreamRevocations(&rest.Config{Host: up.Config.Host, BearerToken: agentE,
		TLSClientConfig: rest.TLSClientConfig{CAData: up.Config.CAData}}, workspace, clusterD)
	must(t, err)
	if _, _, err := otherAgent(ctx, ""); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("cluster E's agent reads cluster D's revocation list: want 403, got %v", err)
	}
	asAlice, err := access.UpstreamRevocations(up.ConfigForToken(aliceTok), workspace, clusterD)
	must(t, err)
	if _, _, err := asAlice(ctx, ""); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("a user reads the revocation list: want 403, got %v", err)
	}

	// No token is stored upstream, only who holds which.
	cms := &corev1.ConfigMapList{}
	must(t, up.Client.List(ctx, cms, client.InNamespace(proxyNamespace)))
	found := false
	for _, cm := range cms.Items {
		for _, v := range cm.Data {
			if strings.Contains(v, aliceResp.Status.Token) || strings.Contains(v, strings.Split(aliceResp.Status.Token, ".")[2]) {
				t.Errorf("ConfigMap %s holds alice's token", cm.Name)
			}
			if strings.Contains(v, aliceName) {
				found = true
			}
		}
	}
	if !found {
		t.Error("no registry ConfigMap records alice's token")
	}

	// Alice loses her upstream right: her token is refused within seconds;
	// bob's is not.
	must(t, up.Client.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: "direct-alice"}}))
	start := time.Now()
	testenv.Eventually(t, 60*time.Second, "alice's direct token revoked", func() error {
		_, err := alice.CoreV1().ConfigMaps("direct-a").Get(ctx, "marker", metav1.GetOptions{})
		if apierrors.IsUnauthorized(err) {
			return nil
		}
		return fmt.Errorf("still %s", statusOf(err))
	})
	t.Logf("alice's direct token refused %s after her RoleBinding was deleted", time.Since(start).Round(100*time.Millisecond))
	if _, err := tokenRequest(t, aliceTok, clusterD, 0); !apierrors.IsForbidden(err) {
		t.Errorf("a new token for alice after the right is gone: want 403, got %s", statusOf(err))
	}
	if _, err := bob.CoreV1().ConfigMaps("direct-a").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("bob, whose right stays: %s", statusOf(err))
	}
	// Cluster D's list names alice's token; cluster E's (where her right
	// stays) does not name hers for E.
	if !agent.rev.Revoked(tokenID(t, aliceResp.Status.Token)) {
		t.Error("cluster D's revocation list does not name alice's token")
	}
	listE, err := access.UpstreamRevocations(&rest.Config{Host: up.Config.Host, BearerToken: agentE,
		TLSClientConfig: rest.TLSClientConfig{CAData: up.Config.CAData}}, workspace, clusterE)
	must(t, err)
	revokedE, _, err := listE(ctx, "")
	must(t, err)
	for _, r := range revokedE {
		if r.ID == tokenID(t, eResp.Status.Token) {
			t.Error("alice's token for cluster E was revoked with her right on cluster D")
		}
	}
}

// tokenID is the jti of a token (unverified).
func tokenID(t *testing.T, tok string) string {
	t.Helper()
	var c struct {
		ID string `json:"jti"`
	}
	jwtClaims(t, tok, &c)
	return c.ID
}

// TestDirectRegistry_PrunedAndEarlierReleaseRevoked: the record of a token
// is deleted once it expired and the rate window passed (kept until then);
// the registry of an earlier release (one ConfigMap per Cluster) goes, its
// live tokens recorded revoked, so the Cluster's agent refuses them; all
// checked against the real API server, the list read as the agent.
func TestDirectRegistry_PrunedAndEarlierReleaseRevoked(t *testing.T) {
	ctx := t.Context()
	const cluster = "direct-pruned"
	key := workspace + "/" + cluster
	agent := agentIdentity(t, cluster, "reg-direct-pruned", cluster)
	now := time.Now()
	labels := func(user string) map[string]string {
		return map[string]string{"fleet.cattle.io/direct-token": "true", "fleet.cattle.io/direct-cluster": shortHash(key),
			"fleet.cattle.io/direct-user": shortHash(user)}
	}
	record := func(id string, issued, exp time.Time) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: proxyNamespace, Name: proxy.TokenRecordName(id), Labels: labels("gone")},
			Data: map[string]string{"token.json": fmt.Sprintf(`{"id":%q,"cluster":%q,"user":"gone","verbs":["get"],"issuedAt":%q,"expiry":%q}`,
				id, key, issued.UTC().Format(time.RFC3339), exp.UTC().Format(time.RFC3339))}}
		must(t, env.Upstream.Client.Create(ctx, cm))
		return cm
	}
	old := record("old", now.Add(-3*time.Hour), now.Add(-2*time.Hour))
	recent := record("recent", now.Add(-30*time.Minute), now.Add(-10*time.Minute))
	live := record("live", now, now.Add(time.Hour))
	legacy := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: proxyNamespace, Name: proxy.LegacyRegistryName(key),
		Labels:      map[string]string{"fleet.cattle.io/direct-tokens": "true"},
		Annotations: map[string]string{"fleet.cattle.io/cluster": key}},
		Data: map[string]string{"tokens.json": fmt.Sprintf(`[{"id":"legacy-live","user":"carol","verbs":["get"],"expiry":%q},{"id":"legacy-old","user":"carol","verbs":["get"],"expiry":%q}]`,
			now.Add(2*time.Hour).UTC().Format(time.RFC3339), now.Add(-time.Hour).UTC().Format(time.RFC3339))}}
	must(t, env.Upstream.Client.Create(ctx, legacy))

	exists := func(cm *corev1.ConfigMap) bool {
		err := env.Upstream.Client.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	testenv.Eventually(t, 30*time.Second, "the expired record deleted, the earlier release's registry revoked", func() error {
		if exists(old) || exists(legacy) {
			return fmt.Errorf("old record %v, earlier registry %v", exists(old), exists(legacy))
		}
		return nil
	})
	if !exists(recent) || !exists(live) {
		t.Errorf("a record deleted too early: recent (expired, within the rate window) %v, live %v", exists(recent), exists(live))
	}
	got := &corev1.ConfigMap{}
	must(t, env.Upstream.Client.Get(ctx, client.ObjectKey{Namespace: proxyNamespace, Name: proxy.TokenRecordName("legacy-live")}, got))
	if !strings.Contains(got.Data["token.json"], `"revokedAt"`) {
		t.Errorf("the earlier release's live token is not recorded revoked: %s", got.Data["token.json"])
	}
	if err := env.Upstream.Client.Get(ctx, client.ObjectKey{Namespace: proxyNamespace, Name: proxy.TokenRecordName("legacy-old")}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the earlier release's expired token was recorded: %v", err)
	}
	// The agent's list names it.
	list, err := access.UpstreamRevocations(&rest.Config{Host: env.Upstream.Config.Host, BearerToken: agent,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.Upstream.Config.CAData}}, workspace, cluster)
	must(t, err)
	testenv.Eventually(t, 10*time.Second, "the agent's revocation list names the earlier release's token", func() error {
		revoked, _, err := list(ctx, "")
		if err != nil {
			return err
		}
		for _, r := range revoked {
			if r.ID == "legacy-live" {
				return nil
			}
		}
		return fmt.Errorf("list %+v", revoked)
	})
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:16]
}
