package uninstall_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/devenv"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/scheme"
	"github.com/gitops-fleet/fleet/internal/uninstall"
)

var suite *testenv.Suite

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{}}, func(s *testenv.Suite) error {
		suite = s
		uninstall.PollInterval = 200 * time.Millisecond
		return nil
	})
}

func admin() client.Client { return suite.Env.Upstream.Client }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// viewer is a client as user alice, who may read everything and change
// nothing (a real request, authorized by the API server's RBAC).
func viewer(t *testing.T) client.Client {
	t.Helper()
	c := admin()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "uninstall-test-viewer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}}}
	must(t, client.IgnoreAlreadyExists(c.Create(t.Context(), role)))
	b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "uninstall-test-viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "alice"}}}
	must(t, client.IgnoreAlreadyExists(c.Create(t.Context(), b)))
	cfg := rest.CopyConfig(suite.Env.Upstream.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice"}
	vc, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	must(t, err)
	return vc
}

func cluster(t *testing.T, ns, name string, finalizers ...string) *fleet.Cluster {
	t.Helper()
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: finalizers}}
	must(t, admin().Create(t.Context(), c))
	return c
}

func exists(t *testing.T, o client.Object) bool {
	t.Helper()
	err := admin().Get(t.Context(), client.ObjectKeyFromObject(o), o)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil && o.GetDeletionTimestamp() == nil
}

func TestUpstream_RefusedWithoutTheRights_NothingChanged(t *testing.T) {
	ws := testenv.Namespace(t, admin(), "ws-")
	c := cluster(t, ws, "c1")
	alice := viewer(t)

	_, err := (&uninstall.Upstream{Client: alice}).Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "you may not") || !strings.Contains(err.Error(), "delete clusters.fleet.cattle.io") ||
		!strings.Contains(err.Error(), "delete customresourcedefinitions.apiextensions.k8s.io") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("uninstall as a viewer: want a refusal naming the missing rights, got %v", err)
	}
	if !exists(t, c) {
		t.Error("the refused uninstall deleted the Cluster")
	}
	// A viewer may look: the dry run lists the Cluster and changes nothing.
	var out bytes.Buffer
	if _, err := (&uninstall.Upstream{Client: alice, DryRun: true, Out: &out}).Run(t.Context()); err != nil {
		t.Fatalf("dry run as a viewer: %v", err)
	}
	if !strings.Contains(out.String(), "Cluster "+ws+"/c1") {
		t.Errorf("the dry run does not list the Cluster:\n%s", out.String())
	}
	if !exists(t, c) {
		t.Error("the dry run deleted the Cluster")
	}

	err = (&uninstall.Agent{Client: alice}).Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "you may not") || !strings.Contains(err.Error(), "delete namespaces") {
		t.Fatalf("uninstall agent as a viewer: want a refusal naming the missing rights, got %v", err)
	}
	must(t, admin().Delete(t.Context(), c))
}

func TestUpstream_RefusedWhileTheControllerIsDown_NothingChanged(t *testing.T) {
	ws := testenv.Namespace(t, admin(), "ws-")
	c := cluster(t, ws, "held", fleet.ClusterFinalizer)
	t.Cleanup(func() {
		// t.Context() has ended by now.
		ctx := suite.Context()
		if admin().Get(ctx, client.ObjectKeyFromObject(c), c) == nil {
			c.Finalizers = nil
			must(t, admin().Update(ctx, c))
			must(t, client.IgnoreNotFound(admin().Delete(ctx, c)))
		}
	})

	_, err := (&uninstall.Upstream{Client: admin()}).Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "Cluster "+ws+"/held") || !strings.Contains(err.Error(), "no available replica") ||
		!strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("want a refusal naming the held Cluster and the controller, got %v", err)
	}
	if !exists(t, c) {
		t.Error("the refused uninstall deleted the Cluster")
	}
}

// TestUpstream_RemovesFleetLeavesTheUsers runs the whole uninstall on an
// upstream holding fleet's objects (without a controller, so none carries
// a finalizer) and an APIService that is not available, which would block
// namespace deletion if it were left for last.
func TestUpstream_RemovesFleetLeavesTheUsers(t *testing.T) {
	c := admin()
	t.Cleanup(func() { reinstallBase(t) })
	part := map[string]string{"app.kubernetes.io/part-of": "fleet"}
	managed := map[string]string{fleet.ManagedLabel: "true"}

	ws := testenv.Namespace(t, c, "ws-")
	userNS := testenv.Namespace(t, c, "user-")
	userCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: userNS, Name: "mine"}}
	userSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "c1-kubeconfig"}, StringData: map[string]string{"value": "x"}}
	generated := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "token-values", Labels: managed}}
	objs := []client.Object{
		userCM, userSecret, generated,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cattle-fleet-system"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cattle-fleet-clusters-system"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet-local", Labels: managed}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cluster-ws-c1-0123", Labels: managed}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "cattle-fleet-system", Name: "fleet-controller", Labels: part},
			Data: map[string]string{"config": `{"bootstrap":{"enabled":true},"capiNamespaces":["capi"]}`}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleet-controller", Labels: part}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "fleet-proxy:reader", Labels: part},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"}},
		&fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "c1"}, Spec: fleet.ClusterSpec{KubeConfigSecret: userSecret.Name}},
		&fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "b1"}},
		&fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "g1"}},
		&fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "t1"}},
	}
	for _, o := range objs {
		must(t, c.Create(t.Context(), o))
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1alpha1.proxy.fleet.cattle.io", "labels": map[string]any{"app.kubernetes.io/part-of": "fleet"}},
		"spec": map[string]any{"group": "proxy.fleet.cattle.io", "version": "v1alpha1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"insecureSkipTLSVerify": true, "service": map[string]any{"namespace": "cattle-fleet-system", "name": "fleet-proxy", "port": int64(443)}},
	}}
	must(t, c.Create(t.Context(), apiService))

	var out bytes.Buffer
	_, err := (&uninstall.Upstream{Client: c, DryRun: true, Out: &out}).Run(t.Context())
	must(t, err)
	for _, want := range []string{"Cluster " + ws + "/c1", "Bundle " + ws + "/b1", "APIService v1alpha1.proxy.fleet.cattle.io", "Namespace cluster-ws-c1-0123",
		"ValidatingAdmissionPolicy fleet-", "CustomResourceDefinition clusters.fleet.cattle.io", "Secret " + ws + "/token-values"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the dry run does not list %q:\n%s", want, out.String())
		}
	}
	for _, notWant := range []string{userNS, ws + "/c1-kubeconfig", "Namespace " + ws} {
		if strings.Contains(out.String(), notWant) {
			t.Errorf("the dry run lists the user's %q:\n%s", notWant, out.String())
		}
	}
	if !exists(t, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "c1"}}) {
		t.Fatal("the dry run deleted the Cluster")
	}

	out.Reset()
	start := time.Now()
	res, err := (&uninstall.Upstream{Client: c, Timeout: 2 * time.Minute, Out: &out}).Run(t.Context())
	t.Logf("uninstall (%.1fs):\n%s", time.Since(start).Seconds(), out.String())
	must(t, err)
	if len(res.Agents) != 0 {
		t.Errorf("no agent ever reported in, yet the uninstall names %v", res.Agents)
	}

	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	must(t, c.List(t.Context(), crds))
	for _, crd := range crds.Items {
		if crd.Spec.Group == "fleet.cattle.io" {
			t.Errorf("CRD %s left", crd.Name)
		}
	}
	for _, ns := range []string{"cattle-fleet-system", "cattle-fleet-clusters-system", "fleet-local", "cluster-ws-c1-0123"} {
		err := c.Get(t.Context(), client.ObjectKey{Name: ns}, &corev1.Namespace{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("namespace %s left (or Terminating): %v", ns, err)
		}
	}
	for _, o := range []client.Object{apiService, generated, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleet-controller"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleet-request-identity"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "fleet-proxy:reader"}}} {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s left: %v", o, o.GetName(), err)
		}
	}
	pols := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyList"}}
	must(t, c.List(t.Context(), pols))
	for _, p := range pols.Items {
		if strings.HasPrefix(p.GetName(), "fleet-") {
			t.Errorf("admission policy %s left", p.GetName())
		}
	}
	for _, o := range []client.Object{userCM, userSecret, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: userNS}}, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}}} {
		if !exists(t, o) {
			t.Errorf("the user's %T %s was deleted", o, o.GetName())
		}
	}

	// Run again: nothing left, nothing to do.
	out.Reset()
	_, err = (&uninstall.Upstream{Client: c, Out: &out}).Run(t.Context())
	must(t, err)
	if !strings.Contains(out.String(), "nothing of fleet is left") {
		t.Errorf("a second uninstall:\n%s", out.String())
	}
}

func TestAgent_RefusedOnTheControllersCluster(t *testing.T) {
	c := admin()
	ns := testenv.Namespace(t, c, "fleet-")
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-controller",
		Labels: map[string]string{"app.kubernetes.io/name": "fleet-controller", "app.kubernetes.io/part-of": "fleet"}}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](0),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fleet-controller"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "fleet-controller"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "fleet"}}}}}}
	must(t, c.Create(t.Context(), d))
	t.Cleanup(func() { _ = c.Delete(suite.Context(), d) })

	err := (&uninstall.Agent{Client: c}).Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "runs the fleet controller") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("uninstall agent where the controller runs: want a refusal, got %v", err)
	}
	if !exists(t, d) {
		t.Error("the refused uninstall agent deleted the controller")
	}
}

func TestAgent_RemovesWhatHelmLeaves(t *testing.T) {
	c := admin()
	part := map[string]string{"app.kubernetes.io/part-of": "fleet"}
	imp := map[string]string{"fleet.cattle.io/impersonator": "true"}
	for _, variant := range []struct {
		name, ns string
		fleets   bool // the agent's namespace is fleet's, and goes
	}{
		{"in cattle-fleet-system", "cattle-fleet-system", true},
		{"in a namespace of the user's", "", false},
	} {
		t.Run(variant.name, func(t *testing.T) {
			ns := variant.ns
			if ns == "" {
				ns = testenv.Namespace(t, c, "platform-")
			} else {
				must(t, client.IgnoreAlreadyExists(c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})))
			}
			userCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"}}
			fleetObjs := []client.Object{
				&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-agent", Labels: part}, Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To[int32](0),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fleet-agent"}},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "fleet-agent"}},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "fleet"}}}}}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-agent-identity"}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-agent"}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-agent-direct-tls", Labels: map[string]string{"fleet.cattle.io/agent-direct": "true"}}},
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-inventory-x", Labels: map[string]string{"fleet.cattle.io/inventory": "true"}}},
				&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-" + ns, Labels: part}},
				&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-priority-class-" + ns, Labels: part}, Value: 1},
				&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cattle-impersonation-" + ns, Labels: imp}},
			}
			must(t, client.IgnoreAlreadyExists(c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cattle-impersonation-system", Labels: imp}})))
			for _, o := range append([]client.Object{userCM}, fleetObjs...) {
				must(t, c.Create(t.Context(), o))
			}

			var out bytes.Buffer
			err := (&uninstall.Agent{Client: c, Namespace: ns, Timeout: 2 * time.Minute, Out: &out}).Run(t.Context())
			t.Logf("uninstall agent:\n%s", out.String())
			must(t, err)
			if err := c.Get(t.Context(), client.ObjectKey{Name: "cattle-impersonation-system"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
				t.Errorf("namespace cattle-impersonation-system left: %v", err)
			}
			nsErr := c.Get(t.Context(), client.ObjectKey{Name: ns}, &corev1.Namespace{})
			if variant.fleets {
				if !apierrors.IsNotFound(nsErr) {
					t.Errorf("namespace %s left: %v", ns, nsErr)
				}
				return
			}
			if nsErr != nil || !exists(t, userCM) {
				t.Errorf("the user's namespace %s or its ConfigMap was deleted: %v", ns, nsErr)
			}
			if !strings.Contains(out.String(), "namespace "+ns+" is not fleet's") {
				t.Errorf("the uninstall does not say it keeps %s:\n%s", ns, out.String())
			}
			for _, o := range fleetObjs {
				if err := c.Get(t.Context(), client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) && o.GetDeletionTimestamp() == nil {
					t.Errorf("%T %s left: %v", o, o.GetName(), err)
				}
			}
		})
	}
}

// reinstallBase puts back the CRDs, policies and shared roles the full
// uninstall removed, so the suite can run again (-count).
func reinstallBase(t *testing.T) {
	root, err := controlplane.RepoRoot()
	must(t, err)
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(root, "kustomize", "base"))
	must(t, err)
	y, err := res.AsYaml()
	must(t, err)
	objs, err := apply.ReadObjects(y)
	must(t, err)
	must(t, devenv.Apply(suite.Context(), admin(), objs))
}
