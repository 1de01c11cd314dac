package proxy_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/kubeconfig"
)

// endpointDo sends a request to fleet-proxy's endpoint, with token as the
// bearer token (none when empty) and, when cert is given, a client
// certificate.
func endpointDo(t *testing.T, token, path string, header http.Header, cert *tls.Certificate) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+endpointAddr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient(t, servingCA, cert).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// The endpoint serves a user with an upstream bearer token and the right
// clusters/proxy exactly as the aggregated path does: the same assertion of
// who the user is, no credential forwarded; and refuses one without the
// right.
func TestEndpoint_ServesTheUpstreamsUsersWithTheirRights(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ep-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	alice, bob := newUser(t, users, "alice"), newUser(t, users, "bob")
	grant(t, ws, alice.name, "c1")
	connect(t, ws+"/c1")

	var e echo
	testenv.Eventually(t, 30*time.Second, "alice reaching c1 through the endpoint", func() error {
		resp := endpointDo(t, alice.token, clusterPath(ws, "c1", "/api/v1/namespaces?limit=1"), nil, nil)
		if resp.StatusCode != http.StatusOK {
			code, msg := status(t, resp)
			return fmt.Errorf("status %d: %s", code, msg)
		}
		e = readEcho(t, resp)
		return nil
	})
	if e.Path != "/api/v1/namespaces" || e.Query != "limit=1" {
		t.Errorf("backend got %s?%s", e.Path, e.Query)
	}
	checkClean(t, e.Header)
	if id := assertedUser(t, e, ws+"/c1"); id.User != alice.name {
		t.Errorf("assertion names %q, want %q", id.User, alice.name)
	}

	// The same downstream identity as through the upstream API server.
	upstream := readEcho(t, eventuallyStatus(t, "alice reaching c1 through the upstream", http.StatusOK, func() *http.Response {
		return alice.do(t, http.MethodGet, clusterPath(ws, "c1", "/api"), nil)
	}))
	if a, b := assertedUser(t, e, ws+"/c1"), assertedUser(t, upstream, ws+"/c1"); !reflect.DeepEqual(a, b) {
		t.Errorf("the endpoint asserts %+v, the upstream path %+v", a, b)
	}

	eventuallyRefused(t, "bob without the right", http.StatusForbidden, "cannot get fleet.cattle.io clusters/proxy", func() *http.Response {
		return endpointDo(t, bob.token, clusterPath(ws, "c1", "/api"), nil, nil)
	})
	// Only an authorized user learns whether a cluster is connected.
	eventuallyRefused(t, "bob on a cluster that does not exist", http.StatusForbidden, "cannot get", func() *http.Response {
		return endpointDo(t, bob.token, clusterPath(ws, "nowhere", "/api"), nil, nil)
	})
}

// What the upstream API server would not accept, the endpoint refuses:
// no credential, a token it does not know, a token for another audience,
// a client certificate (even the aggregator's own), a ServiceAccount's
// token once it is deleted, impersonation; and it serves nothing but the
// clusters' proxy.
func TestEndpoint_RefusesWhatTheUpstreamWouldNot(t *testing.T) {
	ctx := t.Context()
	ws := testenv.Namespace(t, env.Upstream.Client, "ep-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	carol := newUser(t, users, "carol")
	grant(t, ws, carol.name, "c1")
	grant(t, ws, "dave", "c1")
	connect(t, ws+"/c1")
	path := clusterPath(ws, "c1", "/api")

	eventuallyRefused(t, "carol reaching c1 (before the refusals)", http.StatusOK, "", func() *http.Response {
		return endpointDo(t, carol.token, path, nil, nil)
	})

	wantUnauthorized := func(what string, resp *http.Response) {
		t.Helper()
		code, msg := status(t, resp)
		if code != http.StatusUnauthorized || !strings.Contains(msg, "accepts only a bearer token the upstream API server accepts") {
			t.Errorf("%s: %d %s", what, code, msg)
		}
	}
	wantUnauthorized("no credential", endpointDo(t, "", path, nil, nil))
	wantUnauthorized("a made-up token", endpointDo(t, "not-a-token", path, nil, nil))
	wantUnauthorized("carol's token with a byte changed", endpointDo(t, carol.token[:len(carol.token)-2]+"xx", path, nil, nil))

	// A token the upstream API server issued, for another audience.
	tr, err := env.Upstream.Clientset.CoreV1().ServiceAccounts(users).CreateToken(ctx, "carol", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{"some-other-service"}, ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokensMu.Lock()
	tokens = append(tokens, tr.Status.Token)
	tokensMu.Unlock()
	wantUnauthorized("carol's token for another audience", endpointDo(t, tr.Status.Token, path, nil, nil))

	// A client certificate the upstream API server trusts: the
	// aggregator's front-proxy one. The endpoint does not ask for it.
	fp, err := env.Upstream.FrontProxyClientCertificate()
	if err != nil {
		t.Fatal(err)
	}
	wantUnauthorized("the front-proxy client certificate", endpointDo(t, "", path, http.Header{"X-Remote-User": {"dave"}}, &fp))

	code, msg := status(t, endpointDo(t, carol.token, path, http.Header{"Impersonate-User": {"dave"}}, nil))
	if code != http.StatusForbidden || !strings.Contains(msg, "does not impersonate (Impersonate-User)") {
		t.Errorf("impersonation: %d %s", code, msg)
	}
	for _, p := range []string{"/apis/" + proxyv1.APIVersion + "/namespaces/" + ws + "/clusters/c1/attach",
		"/apis/" + proxyv1.APIVersion + "/signingkeys", "/apis/" + proxyv1.APIVersion} {
		if code, msg := status(t, endpointDo(t, carol.token, p, nil, nil)); code != http.StatusNotFound || !strings.Contains(msg, "serves only") {
			t.Errorf("%s: %d %s", p, code, msg)
		}
	}

	// A deleted ServiceAccount's token stops working once the cached
	// answer (10 s) expires.
	if err := env.Upstream.Client.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: users, Name: "carol"}}); err != nil {
		t.Fatal(err)
	}
	eventuallyRefused(t, "carol's token after her ServiceAccount is deleted", http.StatusUnauthorized, "accepts only a bearer token", func() *http.Response {
		return endpointDo(t, carol.token, path, nil, nil)
	})
}

// fleet-proxy publishes the CA of the endpoint's certificate beside the URL
// the chart wrote, where `fleet kubeconfig` reads them.
func TestEndpoint_PublishesItsCA(t *testing.T) {
	var cm corev1.ConfigMap
	if err := env.Upstream.Client.Get(t.Context(), client.ObjectKey{Namespace: proxyv1.EndpointConfigMapNamespace, Name: proxyv1.EndpointConfigMap}, &cm); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal([]byte(cm.Data[proxyv1.EndpointCAKey]), servingCA) {
		t.Errorf("%s is %q, want the serving CA", proxyv1.EndpointCAKey, cm.Data[proxyv1.EndpointCAKey])
	}
	if cm.Data[proxyv1.EndpointURLKey] != "https://"+endpointAddr {
		t.Errorf("the chart's url was changed to %q", cm.Data[proxyv1.EndpointURLKey])
	}
}

// `fleet kubeconfig` chooses the endpoint when it is published and the
// caller's user has a bearer token: the kubeconfig it writes works there as
// client-go (kubectl) uses it, and its <name>-upstream context through the
// upstream API server, as the same user. A user with a client certificate
// keeps the upstream path, and is told why.
func TestEndpoint_KubeconfigChoosesIt(t *testing.T) {
	ctx := t.Context()
	ws := testenv.Namespace(t, env.Upstream.Client, "ep-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	erin := newUser(t, users, "erin")
	grant(t, ws, erin.name, "c1")
	connect(t, ws+"/c1")
	ref := kubeconfig.ClusterRef{Workspace: ws, Name: "c1"}

	upstream := writeFile(t, "erin.kubeconfig", func() []byte {
		b, err := controlplane.KubeconfigFor(env.Upstream.ConfigForToken(erin.token), "upstream")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}())
	data, warnings, err := kubeconfig.Generate(ctx, kubeconfig.Request{Kubeconfig: upstream, Cluster: ref, NoDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(warnings, "\n"), "through fleet-proxy's endpoint https://"+endpointAddr) {
		t.Errorf("warnings do not say the endpoint is used: %q", warnings)
	}
	out, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out.Clusters["c1"].Server, "https://"+endpointAddr+kubeconfig.ProxyPath(ref); got != want {
		t.Errorf("server %q, want %q", got, want)
	}
	if got := out.Clusters["c1-upstream"].Server; !strings.HasPrefix(got, strings.TrimSuffix(env.Upstream.Config.Host, "/")) {
		t.Errorf("c1-upstream's server %q is not the upstream API server's", got)
	}
	for _, name := range []string{"c1", "c1-upstream"} {
		cfg, err := clientcmd.NewNonInteractiveClientConfig(*out, name, nil, nil).ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "erin through context "+name, func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/api/v1/pods", nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				code, msg := status(t, resp)
				return fmt.Errorf("status %d: %s", code, msg)
			}
			if id := assertedUser(t, readEcho(t, resp), ws+"/c1"); id.User != erin.name {
				return fmt.Errorf("asserted %q", id.User)
			}
			return nil
		})
	}

	admin := writeFile(t, "admin.kubeconfig", env.Upstream.Kubeconfig)
	data, warnings, err = kubeconfig.Generate(ctx, kubeconfig.Request{Kubeconfig: admin, Cluster: ref, NoDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(warnings, "\n"), "has no bearer token") {
		t.Errorf("warnings do not say why the endpoint is not used: %q", warnings)
	}
	if out, err = clientcmd.Load(data); err != nil {
		t.Fatal(err)
	}
	if _, ok := out.Contexts["c1-upstream"]; ok || strings.Contains(out.Clusters["c1"].Server, endpointAddr) {
		t.Errorf("a client-certificate user was sent to the endpoint: %v", out.Clusters["c1"].Server)
	}
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
