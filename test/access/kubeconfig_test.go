package access_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/proxyenv"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/kubeconfig"
	"github.com/gitops-fleet/fleet/renderer"
)

// The example `fleet kubeconfig` is shown with (examples/gitops).
const (
	gitopsDir      = "../../examples/gitops"
	exampleCluster = "dev-1"
)

// startAgent plays Cluster cluster's agent, as in
// TestUserReachesDownstreamThroughTheTunnel: the access handler to the
// downstream API server behind a tunnel client authenticated as agentToken.
// It returns when the tunnel is up; the agent stops with the test.
func startAgent(t *testing.T, cluster, agentToken string) {
	t.Helper()
	ctx := t.Context()
	up, down := env.Upstream, env.Downstreams[0]
	key := workspace + "/" + cluster
	a, err := proxyenv.NewAgent(ctx, proxyenv.AgentOptions{Upstream: up.Config, Token: agentToken,
		Workspace: workspace, Cluster: cluster, Local: down.Config})
	must(t, err)
	agent := a.Tunnel
	run := testenv.Start(t, "agent tunnel "+cluster, agent.Run)
	t.Cleanup(func() {
		if err := run.Stop(10 * time.Second); err != nil {
			t.Error(err)
		}
	})
	testenv.Eventually(t, 30*time.Second, cluster+"'s tunnel", func() error {
		if !tunnels.Server.HasSession(key) || !agent.Connected() {
			return fmt.Errorf("not connected (sessions %d)", tunnels.Server.Sessions(key))
		}
		return nil
	})
}

// exampleAccess reads examples/gitops/access/payments.yaml: the upstream
// objects, and the Bundle.
func exampleAccess(t *testing.T) ([]client.Object, *fleet.Bundle) {
	t.Helper()
	data, err := os.ReadFile(gitopsDir + "/access/payments.yaml")
	must(t, err)
	var upstream []client.Object
	var bundle *fleet.Bundle
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		u := &unstructured.Unstructured{}
		must(t, yaml.Unmarshal(doc, &u.Object))
		var obj client.Object
		switch u.GetKind() {
		case "Role":
			obj = &rbacv1.Role{}
		case "RoleBinding":
			obj = &rbacv1.RoleBinding{}
		case "Bundle":
			bundle = &fleet.Bundle{}
			obj = bundle
		default:
			t.Fatalf("access/payments.yaml: unexpected %s", u.GetKind())
		}
		must(t, runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, obj, true))
		if obj != bundle {
			upstream = append(upstream, obj)
		}
	}
	if bundle == nil || len(upstream) != 2 {
		t.Fatalf("access/payments.yaml: want a Role, a RoleBinding and a Bundle")
	}
	return upstream, bundle
}

// writeKubeconfig writes a caller's kubeconfig file for cfg, edited by edit.
func writeKubeconfig(t *testing.T, cfg *rest.Config, edit func(*clientcmdapi.AuthInfo)) string {
	t.Helper()
	data, err := controlplane.KubeconfigFor(cfg, "upstream")
	must(t, err)
	kc, err := clientcmd.Load(data)
	must(t, err)
	if edit != nil {
		edit(kc.AuthInfos["upstream"])
	}
	path := filepath.Join(t.TempDir(), "config")
	must(t, clientcmd.WriteToFile(*kc, path))
	return path
}

// aggregateView fills the downstream's ClusterRole view as the
// controller manager's clusterrole-aggregation controller does (this suite
// runs none): the rules of every ClusterRole labelled aggregate-to-view.
func aggregateView(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	c := env.Downstreams[0].Client
	view := &rbacv1.ClusterRole{}
	must(t, c.Get(ctx, client.ObjectKey{Name: "view"}, view))
	if len(view.Rules) > 0 || view.AggregationRule == nil {
		return
	}
	var rules []rbacv1.PolicyRule
	for _, sel := range view.AggregationRule.ClusterRoleSelectors {
		list := &rbacv1.ClusterRoleList{}
		must(t, c.List(ctx, list, client.MatchingLabels(sel.MatchLabels)))
		for _, r := range list.Items {
			if r.Name != view.Name {
				rules = append(rules, r.Rules...)
			}
		}
	}
	view.Rules = rules
	must(t, c.Update(ctx, view))
}

// TestKubeconfig_TeamMemberOfTheGitopsExampleListsPods applies the team
// access of examples/gitops (upstream Role and RoleBinding, the Bundle's
// manifests downstream, as its agent would) and runs `fleet kubeconfig`'s
// logic as a member of team payments (the upstream admin's kubeconfig,
// impersonating carol in group payments, as an OIDC user would be): no
// warning, and the printed kubeconfig lists pods of namespace payments
// through fleet-proxy, served downstream as fleet:carol, and nothing else.
func TestKubeconfig_TeamMemberOfTheGitopsExampleListsPods(t *testing.T) {
	ctx := t.Context()
	up, down := env.Upstream, env.Downstreams[0]
	agentTok := agentIdentity(t, exampleCluster, "reg-"+exampleCluster, exampleCluster)

	upstreamObjs, bundle := exampleAccess(t)
	for _, o := range upstreamObjs {
		must(t, up.Client.Create(ctx, o))
	}
	cl := &fleet.Cluster{}
	must(t, up.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: exampleCluster}, cl))
	out, err := renderer.RenderBundle(bundle, cl, nil)
	must(t, err)
	objs, err := out.Objects()
	must(t, err)
	for _, ns := range []string{bundle.Spec.DefaultNamespace, "payments-other"} {
		must(t, down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		must(t, down.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}))
		must(t, down.Client.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger"},
			Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "ledger", Image: "registry.example/ledger:1"}}},
		}))
	}
	for _, o := range objs {
		if o.GetNamespace() == "" {
			o.SetNamespace(bundle.Spec.DefaultNamespace) // as the agent applies it
		}
		must(t, down.Client.Create(ctx, o))
	}
	aggregateView(t)
	startAgent(t, exampleCluster, agentTok)

	callerKubeconfig := writeKubeconfig(t, up.Config, func(u *clientcmdapi.AuthInfo) {
		u.Impersonate, u.ImpersonateGroups = "carol", []string{"payments"}
	})
	ref := kubeconfig.ClusterRef{Workspace: workspace, Name: exampleCluster}
	data, warnings, err := kubeconfig.Generate(ctx, kubeconfig.Request{Kubeconfig: callerKubeconfig, Cluster: ref})
	must(t, err)
	if len(warnings) != 0 {
		t.Errorf("a member of team payments is warned: %q", warnings)
	}
	printed, err := clientcmd.Load(data)
	must(t, err)
	if want := strings.TrimSuffix(up.Config.Host, "/") + kubeconfig.ProxyPath(ref); printed.CurrentContext != exampleCluster ||
		printed.Clusters[exampleCluster] == nil || printed.Clusters[exampleCluster].Server != want {
		t.Fatalf("printed kubeconfig: current context %q, clusters %v; want context %s with server %s", printed.CurrentContext, printed.Clusters, exampleCluster, want)
	}

	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	must(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	testenv.Eventually(t, 30*time.Second, "carol lists pods in payments with the printed kubeconfig", func() error {
		pods, err := cs.CoreV1().Pods(bundle.Spec.DefaultNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return errors.New(statusOf(err))
		}
		if len(pods.Items) != 1 || pods.Items[0].Name != "ledger" {
			return fmt.Errorf("want pod ledger, got %d pods", len(pods.Items))
		}
		return nil
	})
	// view is all the Bundle gives, and only in payments.
	if _, err := cs.CoreV1().Pods("payments-other").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "fleet:carol") {
		t.Errorf("pods in payments-other: want the downstream's 403 for fleet:carol, got %s", statusOf(err))
	}
	if err := cs.CoreV1().Pods(bundle.Spec.DefaultNamespace).Delete(ctx, "ledger", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting a pod with view: want the downstream's 403, got %s", statusOf(err))
	}
}

// TestKubeconfig_WarnsAUserWithoutTheRight runs `fleet kubeconfig`'s logic
// as an upstream user with no right on the example's Cluster: the
// kubeconfig is still made, with the warnings examples/gitops/README.md
// shows, and fleet-proxy refuses it. A Cluster that does not exist is an
// error naming it.
func TestKubeconfig_WarnsAUserWithoutTheRight(t *testing.T) {
	ctx := t.Context()
	up := env.Upstream
	_, _, tok := upstreamUser(t, "users", "mallory-kc", exampleCluster)
	callerKubeconfig := writeKubeconfig(t, up.ConfigForToken(tok), nil)
	ref := kubeconfig.ClusterRef{Workspace: workspace, Name: exampleCluster}

	data, warnings, err := kubeconfig.Generate(ctx, kubeconfig.Request{Kubeconfig: callerKubeconfig, Cluster: ref, Options: kubeconfig.Options{ContextName: "mallory"}})
	must(t, err)
	if len(warnings) != 2 || !strings.Contains(warnings[0], "may not read Cluster") || !strings.Contains(warnings[1], "may not get clusters/proxy") {
		t.Fatalf("want the warnings that mallory may not read the Cluster nor use its proxy, got %q", warnings)
	}
	readme, err := os.ReadFile(gitopsDir + "/README.md")
	must(t, err)
	for _, w := range warnings {
		if !strings.Contains(string(readme), "\nwarning: "+w+"\n") {
			t.Errorf("examples/gitops/README.md must show the warning as printed (update the README):\nwarning: %s", w)
		}
	}
	if strings.Contains(strings.Join(warnings, "\n"), tok) {
		t.Error("a warning holds the user's token")
	}

	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	must(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	testenv.Eventually(t, 30*time.Second, "fleet-proxy's 403 with mallory's kubeconfig", func() error {
		_, err := cs.CoreV1().Pods("payments").List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "clusters/proxy") {
			return nil
		}
		return fmt.Errorf("want fleet-proxy's 403, got %s", statusOf(err))
	})

	// The admin may read Clusters: a missing one is an error naming it.
	admin := writeKubeconfig(t, up.Config, nil)
	_, _, err = kubeconfig.Generate(ctx, kubeconfig.Request{Kubeconfig: admin, Cluster: kubeconfig.ClusterRef{Workspace: workspace, Name: "no-such-cluster"}})
	if err == nil || !strings.Contains(err.Error(), `no Cluster "no-such-cluster" in workspace "`+workspace+`"`) {
		t.Errorf("a Cluster that does not exist: want an error naming it, got %v", err)
	}
}
