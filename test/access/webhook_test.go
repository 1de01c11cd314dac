package access_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/gitops-fleet/fleet/agent/access"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/direct"
)

// The downstream API server uses a token webhook served by the test
// process (mode webhook of the direct endpoint, as `fleet-dev` sets it up):
// its address and certificate exist before the control planes start; the
// handler is the agent's, once a test sets it (until then every review is
// unauthenticated).
var tokenWebhook atomic.Pointer[http.Handler]

// startTokenWebhook serves the downstream's token webhook and returns the
// downstream API server's flags naming it.
func startTokenWebhook() ([]string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := tokenWebhook.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(authnv1.TokenReview{TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"}})
	})}
	go func() {
		_ = srv.Serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	}()
	dir, err := os.MkdirTemp("", "fleet-token-webhook-")
	if err != nil {
		return nil, err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["agent"] = &clientcmdapi.Cluster{Server: "https://" + l.Addr().String() + direct.AuthenticatePath, CertificateAuthorityData: certPEM}
	kc.AuthInfos["kube-apiserver"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["webhook"] = &clientcmdapi.Context{Cluster: "agent", AuthInfo: "kube-apiserver"}
	kc.CurrentContext = "webhook"
	path := filepath.Join(dir, "webhook.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return nil, err
	}
	return []string{
		"authentication-token-webhook-config-file=" + path,
		"authentication-token-webhook-version=v1",
		// A revocation is seen at once (fleet-dev uses 10 s).
		"authentication-token-webhook-cache-ttl=1s",
	}, nil
}

// TestTokenWebhook_AnswersOnlyItsAPIServer (issue 27 finding 3): with the
// agent as the downstream API server's token webhook, a direct token
// authenticates requests to that API server as fleet:<user>, but a
// service that reviews tokens for its own audience through the same API
// server (Vault's Kubernetes auth, as a ServiceAccount allowed to create
// TokenReviews) is told the token is not authenticated; a review without
// audiences (the API server's) or naming the API server's is.
func TestTokenWebhook_AnswersOnlyItsAPIServer(t *testing.T) {
	ctx := t.Context()
	down := env.Downstreams[0]
	const cluster = "direct-webhook"
	agentTok := agentIdentity(t, cluster, "reg-direct-webhook", cluster)
	aliceName, _, aliceTok := upstreamUser(t, "webhook-users", "alice", cluster)
	grantProxy(t, "webhook-alice", aliceName, cluster, assertion.DirectVerbs...)

	// The agent learns its API server's audiences as it does in a pod: a
	// token of its own ServiceAccount, issued without audiences.
	must(t, down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "webhook-agent"}}))
	must(t, down.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "webhook-agent", Name: "fleet-agent"}}))
	auds, err := access.DiscoverAPIAudiences(ctx, down.Clientset, "webhook-agent", "fleet-agent")
	must(t, err)
	if len(auds) == 0 {
		t.Fatal("no audiences discovered")
	}
	agent := startDirectAgentWith(t, cluster, agentTok, auds)
	h := agent.h.ServeTokenReview(agent.rev)
	tokenWebhook.Store(&h)
	t.Cleanup(func() { tokenWebhook.Store(nil) })
	enableDirect(t, cluster, agent.srv.URL, certPEM(agent.srv))
	resp, err := tokenRequest(t, aliceTok, cluster, 0)
	must(t, err)

	// Alice at the downstream API server itself: fleet:<alice>.
	aliceDown, err := kubernetes.NewForConfig(&rest.Config{Host: down.Config.Host, BearerToken: resp.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: down.Config.CAData}})
	must(t, err)
	testenv.Eventually(t, 30*time.Second, "the downstream API server authenticates alice's direct token", func() error {
		r, err := aliceDown.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("%s", statusOf(err))
		}
		if r.Status.UserInfo.Username != "fleet:"+aliceName {
			return fmt.Errorf("authenticated as %q", r.Status.UserInfo.Username)
		}
		return nil
	})

	// "Vault": a ServiceAccount that may create TokenReviews, as Vault's
	// Kubernetes auth needs, reviewing tokens for its own audience.
	must(t, down.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "webhook-agent", Name: "vault"}}))
	must(t, down.Client.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "vault-auth-delegator"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "webhook-agent", Name: "vault"}}}))
	vaultTok, err := down.ServiceAccountToken(ctx, "webhook-agent", "vault", time.Hour)
	must(t, err)
	vault, err := kubernetes.NewForConfig(down.ConfigForToken(vaultTok))
	must(t, err)
	review := func(audiences ...string) authnv1.TokenReviewStatus {
		t.Helper()
		var st authnv1.TokenReviewStatus
		testenv.Eventually(t, 30*time.Second, "vault's TokenReview", func() error {
			r, err := vault.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
				Spec: authnv1.TokenReviewSpec{Token: resp.Status.Token, Audiences: audiences}}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("%s", statusOf(err))
			}
			st = r.Status
			return nil
		})
		return st
	}
	for _, foreign := range [][]string{{"vault"}, {"https://vault.example.com"}, {"fleet-default/" + cluster}} {
		if st := review(foreign...); st.Authenticated {
			t.Errorf("a review for audiences %v authenticated alice's direct token as %q", foreign, st.User.Username)
		}
	}
	if st := review(); !st.Authenticated || st.User.Username != "fleet:"+aliceName {
		t.Errorf("a review without audiences (the API server's): %+v", st)
	}
	st := review(append([]string{"vault"}, auds...)...)
	if !st.Authenticated || strings.Join(st.Audiences, ",") != strings.Join(auds, ",") {
		t.Errorf("a review naming the API server's audiences %v: authenticated %v for %v", auds, st.Authenticated, st.Audiences)
	}
}
