package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/devenv"
	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/proxy"
)

// writeKubeconfig writes cfg (a client-certificate user of the upstream) as
// a kubeconfig file, as a user of the upstream would have it.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["upstream"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["me"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["upstream"] = &clientcmdapi.Context{Cluster: "upstream", AuthInfo: "me"}
	kc.CurrentContext = "upstream"
	p := filepath.Join(t.TempDir(), "upstream.kubeconfig")
	must(t, clientcmd.WriteToFile(*kc, p))
	return p
}

// bin runs one of the project's binaries (fleet, kubectl) and returns its
// combined output.
func bin(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	dir := os.Getenv("FLEET_BIN_DIR")
	if dir == "" {
		dir, _ = filepath.Abs("../../bin")
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(dir, name), args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// unauthorized reports whether kubectl's output is its answer to a 401.
func unauthorized(out string) bool {
	return strings.Contains(out, "Unauthorized") || strings.Contains(out, "You must be logged in")
}

// nodeAddress is the InternalIP of the dev cluster's node.
func nodeAddress(t *testing.T, dev string) string {
	t.Helper()
	nodes, err := clientset(t, dev).CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	must(t, err)
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				return a.Address
			}
		}
	}
	t.Fatalf("no InternalIP on the nodes of %s", dev)
	return ""
}

// testDirect: the authorized cluster endpoint of Cluster name (dev cluster
// dev), published on a port of its node: served by the agent (mode agent),
// or by the dev cluster's API server with the agent as its token webhook
// (mode webhook; `fleet-dev` set its flags). A user with clusters/proxy
// gets a kubeconfig with a direct context from `fleet kubeconfig`; kubectl
// reaches the cluster with it with the user's rights, also while the
// upstream's API server is stopped and fleet-proxy is gone; tokens that are
// expired, for another cluster or forged are refused, and a user whose
// upstream right is removed loses the direct access within seconds.
func testDirect(t *testing.T, name, dev, mode string) {
	port := cluster(dev).DirectPort()
	url := fmt.Sprintf("https://%s:%d", nodeAddress(t, dev), port)
	if mode == "webhook" {
		url = fmt.Sprintf("https://127.0.0.1:%d", cluster(dev).APIPort)
	}
	updateCluster(t, name, func(c *fleet.Cluster) {
		c.Spec.AgentDirectEndpoint = &fleet.DirectEndpointSpec{URL: url, HostPort: int32(port), Mode: mode}
	})
	var ca string
	must(t, devenv.Poll(t.Context(), 4*time.Minute, func() error {
		c := getCluster(t, name)
		if ca = c.Status.Agent.DirectEndpointCA; ca == "" {
			return fmt.Errorf("no status.agent.directEndpointCA yet (agent rolling out with the direct endpoint)")
		}
		return nil
	}))
	runningAgent(t, clientset(t, dev), 3*time.Minute)

	user := "dana-" + mode + "-" + name
	grantProxy(t, user, name)
	upKubeconfig := writeKubeconfig(t, upstreamUser(t, user, teamGroup))
	out := filepath.Join(t.TempDir(), name+".kubeconfig")
	msg, err := bin(t, "fleet", "kubeconfig", "--kubeconfig", upKubeconfig, "--cluster", ws+"/"+name, "--output-file", out)
	if err != nil {
		t.Fatalf("fleet kubeconfig: %v\n%s", err, msg)
	}
	t.Logf("fleet kubeconfig: %s", strings.TrimSpace(msg))
	directCtx := name + "-direct"
	kubectl := func(args ...string) (string, error) {
		return bin(t, "kubectl", append([]string{"--kubeconfig", out, "--context", directCtx, "--request-timeout", "20s"}, args...)...)
	}

	t.Run("kubectl through the direct context: the user's rights, nothing more", func(t *testing.T) {
		must(t, devenv.Poll(t.Context(), time.Minute, func() error {
			got, err := kubectl("get", "pods", "-n", teamNS, "-l", "app=echo", "-o", "name")
			if err != nil || !strings.Contains(got, "pod/echo-") {
				return fmt.Errorf("kubectl get pods: %v: %s", err, got)
			}
			return nil
		}))
		got, err := kubectl("get", "pods", "-n", "kube-system")
		if err == nil || !strings.Contains(got, "fleet:"+user) || !strings.Contains(got, "forbidden") {
			t.Errorf("kube-system through the direct context: %v %s; want the downstream's 403 naming fleet:%s", err, got, user)
		}
		got, err = kubectl("get", "pods", "-n", teamNS, "--as", "system:admin")
		if err == nil {
			t.Errorf("--as through the direct context: %s; want a refusal", got)
		}
	})

	// fleet-proxy's private keys are in its replicas' memory only, so
	// tokens of its keys that it would not issue (expired, for another
	// cluster) are made and refused in test/access (TestDirectEndpoint);
	// here: no Secret holds a signing key, and a forged token is refused.
	t.Run("refused: a forged token; no signing key at rest", func(t *testing.T) {
		err := up.Get(t.Context(), client.ObjectKey{Namespace: agentNS, Name: proxy.LegacySigningSecret}, &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("Secret %s/%s: %v; want it gone", agentNS, proxy.LegacySigningSecret, err)
		}
		_, fk, _ := ed25519.GenerateKey(rand.Reader)
		forger, err := assertion.NewSigner(fk, 0)
		must(t, err)
		id := assertion.Identity{User: user, Groups: []string{teamGroup}}
		forged, _, err := forger.SignDirect(id, ws+"/"+name, assertion.DirectVerbs, time.Now(), time.Hour)
		must(t, err)
		for what, tok := range map[string]string{"a forged token": forged} {
			cfg := &rest.Config{Host: url, BearerToken: tok, TLSClientConfig: rest.TLSClientConfig{CAData: []byte(ca)}}
			_, err := kube(t, cfg).CoreV1().Pods(teamNS).List(t.Context(), metav1.ListOptions{})
			if statusCode(err) != http.StatusUnauthorized {
				t.Errorf("%s: %v; want 401", what, err)
			}
		}
		if mode != "webhook" {
			return
		}
		// The API server cannot limit verbs: a read-only user's token is
		// not accepted as the webhook (the agent's endpoint would take it).
		reader := "ro-" + name
		must(t, up.Create(t.Context(), &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "proxy-" + reader},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"clusters/proxy"},
				ResourceNames: []string{name}, Verbs: []string{"get"}}},
		}))
		must(t, up.Create(t.Context(), &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "proxy-" + reader},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "proxy-" + reader},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: reader}},
		}))
		roOut := filepath.Join(t.TempDir(), "ro.kubeconfig")
		msg, err := bin(t, "fleet", "kubeconfig", "--kubeconfig", writeKubeconfig(t, upstreamUser(t, reader, teamGroup)), "--cluster", ws+"/"+name, "--output-file", roOut)
		if err != nil || !strings.Contains(msg, "only the verbs [get]") {
			t.Fatalf("fleet kubeconfig for a get-only user: %v %s; want a warning naming the verbs", err, msg)
		}
		got, err := bin(t, "kubectl", "--kubeconfig", roOut, "--context", directCtx, "get", "pods", "-n", teamNS)
		if err == nil || !unauthorized(got) {
			t.Errorf("a get-only token through the API server's webhook: %v %s; want Unauthorized", err, got)
		}
	})

	t.Run("the upstream's API server stopped and fleet-proxy gone: the direct context still works", func(t *testing.T) {
		upCS := clientset(t, "upstream")
		scale := func(n int32) {
			must(t, devenv.Poll(t.Context(), 30*time.Second, func() error {
				sc, err := upCS.AppsV1().Deployments(agentNS).GetScale(t.Context(), "fleet-proxy", metav1.GetOptions{})
				if err != nil {
					return err
				}
				sc.Spec.Replicas = n
				_, err = upCS.AppsV1().Deployments(agentNS).UpdateScale(t.Context(), "fleet-proxy", sc, metav1.UpdateOptions{})
				return err
			}))
		}
		scale(0)
		defer func() {
			scale(2)
			must(t, devenv.Poll(t.Context(), 3*time.Minute, func() error {
				d, err := upCS.AppsV1().Deployments(agentNS).Get(t.Context(), "fleet-proxy", metav1.GetOptions{})
				if err != nil {
					return err
				}
				return rolledOut(d)
			}))
		}()
		must(t, devenv.Poll(t.Context(), time.Minute, func() error {
			pods, err := upCS.CoreV1().Pods(agentNS).List(t.Context(), metav1.ListOptions{LabelSelector: "app=fleet-proxy"})
			if err != nil {
				return err
			}
			if len(pods.Items) > 0 {
				return fmt.Errorf("%d fleet-proxy pods left", len(pods.Items))
			}
			return nil
		}))
		resume, err := cluster("upstream").PauseAPIServer()
		must(t, err)
		resumed := false
		defer func() {
			if !resumed {
				_ = resume()
			}
		}()
		// The proxy context cannot answer now; the direct one does.
		start := time.Now()
		got, err := kubectl("get", "pods", "-n", teamNS, "-l", "app=echo", "-o", "name")
		if err != nil || !strings.Contains(got, "pod/echo-") {
			t.Errorf("kubectl get pods through the direct context with the upstream stopped: %v: %s", err, got)
		}
		t.Logf("direct request (mode %s) answered in %s with the upstream API server stopped", mode, time.Since(start).Round(time.Millisecond))
		got, err = kubectl("get", "pods", "-n", "kube-system")
		if err == nil || !strings.Contains(got, "forbidden") {
			t.Errorf("kube-system with the upstream stopped: %v %s; want the downstream's 403 still", err, got)
		}
		if mode == "agent" {
			// An agent that restarts while the upstream is unreachable
			// still verifies tokens: the keys and the revocation list it
			// kept downstream.
			ds := clientset(t, dev)
			pods, err := ds.CoreV1().Pods(agentNS).List(t.Context(), metav1.ListOptions{LabelSelector: agentPods})
			must(t, err)
			for _, p := range pods.Items {
				must(t, ds.CoreV1().Pods(agentNS).Delete(t.Context(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
			}
			must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
				now, err := ds.CoreV1().Pods(agentNS).List(t.Context(), metav1.ListOptions{LabelSelector: agentPods})
				if err != nil {
					return err
				}
				for _, p := range now.Items {
					for _, old := range pods.Items {
						if p.UID == old.UID {
							return fmt.Errorf("old agent pod %s still there", p.Name)
						}
					}
				}
				got, err := kubectl("get", "pods", "-n", teamNS, "-l", "app=echo", "-o", "name")
				if err != nil || !strings.Contains(got, "pod/echo-") {
					return fmt.Errorf("through the restarted agent: %v: %s", err, got)
				}
				return nil
			}))
			t.Logf("a new agent pod serves the direct context with the upstream still stopped")
		}
		resumed = true
		must(t, resume())
	})

	t.Run("the user's upstream right removed: the direct token is refused within seconds", func(t *testing.T) {
		must(t, up.Delete(t.Context(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "proxy-" + user}}))
		start := time.Now()
		must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
			got, err := kubectl("get", "pods", "-n", teamNS)
			if err != nil && unauthorized(got) {
				return nil
			}
			return fmt.Errorf("still answered: %v %s", err, got)
		}))
		t.Logf("direct token (mode %s) refused %s after the RoleBinding was deleted", mode, time.Since(start).Round(100*time.Millisecond))
		// And no new one is issued: the kubeconfig has no direct context,
		// and says why.
		again := filepath.Join(t.TempDir(), "again")
		msg, err := bin(t, "fleet", "kubeconfig", "--kubeconfig", upKubeconfig, "--cluster", ws+"/"+name, "--output-file", again)
		b, _ := os.ReadFile(again)
		if err != nil || !strings.Contains(msg, "you may not get clusters/proxy") || strings.Contains(string(b), directCtx) {
			t.Errorf("fleet kubeconfig after the right is gone: %v %s; want a kubeconfig without %s and a warning naming the missing right", err, msg, directCtx)
		}
	})
}
