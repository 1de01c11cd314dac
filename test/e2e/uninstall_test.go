package e2e

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/dev/devcluster"
	"github.com/gitops-fleet/fleet/dev/devenv"
	"github.com/gitops-fleet/fleet/internal/uninstall"
)

// userNamespace is a namespace of the user's, made before the uninstall,
// with a ConfigMap: it must stay as it is, in every cluster.
const userNamespace = "e2e-user-apps"

// testUninstall removes fleet the documented way (fleet uninstall upstream,
// fleet uninstall agent on the downstream that still runs one) and checks,
// by name and independently of the uninstall's own rules, that nothing of
// fleet is left in any cluster and nothing is stuck Terminating, while the
// user's namespaces and Secrets stay. It must run last: it removes the
// product the other tests share.
func testUninstall(t *testing.T, dev2Name string) {
	clusters := []string{"upstream", "dev-1", "dev-2"}
	userUIDs := map[string]string{}
	for _, name := range clusters {
		c := clientFor(t, name)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: userNamespace}}
		must(t, client.IgnoreAlreadyExists(c.Create(t.Context(), ns)))
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: userNamespace, Name: "keep-me"}, Data: map[string]string{"k": "v"}}
		must(t, client.IgnoreAlreadyExists(c.Create(t.Context(), cm)))
		must(t, c.Get(t.Context(), client.ObjectKeyFromObject(cm), cm))
		userUIDs[name] = string(cm.UID)
	}
	// A kubeconfig Secret the user committed (examples/gitops) stays too.
	userSecret := client.ObjectKey{Namespace: ws, Name: "dev-1-kubeconfig"}
	haveUserSecret := up.Get(t.Context(), userSecret, &corev1.Secret{}) == nil

	var out bytes.Buffer
	start := time.Now()
	res, err := (&uninstall.Upstream{Client: up, Timeout: 3 * time.Minute, Out: &out}).Run(t.Context())
	t.Logf("fleet uninstall (%.1fs):\n%s", time.Since(start).Seconds(), out.String())
	if err != nil {
		t.Fatalf("fleet uninstall: %v\n%s", err, devenv.PodReport(t.Context(), cluster("upstream"), agentNS))
	}
	// dev-2's agent was installed with helm (agent-initiated): the
	// controller never had its kubeconfig, so the uninstall names it.
	if dev2Name != "" {
		found := false
		for _, a := range res.Agents {
			found = found || a.Cluster == ws+"/"+dev2Name
		}
		if !found {
			t.Errorf("the uninstall did not name %s/%s, whose agent still runs in dev-2: %v", ws, dev2Name, res.Agents)
		}
	}
	for _, a := range res.Agents {
		if a.Cluster == ws+"/dev-1" {
			t.Errorf("dev-1's agent was pushed by the controller and should have been removed by it: %s", a)
		}
	}

	out.Reset()
	start = time.Now()
	err = (&uninstall.Agent{Client: clientFor(t, "dev-2"), Timeout: 2 * time.Minute, Out: &out}).Run(t.Context())
	t.Logf("fleet uninstall agent on dev-2 (%.1fs):\n%s", time.Since(start).Seconds(), out.String())
	must(t, err)

	// dev-1's API server asks its agent about direct tokens: the operator
	// (devcluster, as docs/operations.md "Direct access" says) made the
	// agent's namespace and put the endpoint's certificate in it before
	// fleet pushed the agent. Those are the operator's, and stay.
	operators := map[string][]string{"dev-1": {"namespace " + devcluster.DirectAgentNamespace, "Secret " + devcluster.DirectTLSSecret}}
	for _, name := range clusters {
		c := clientFor(t, name)
		var left []string
		found := map[string]bool{}
		for _, l := range fleetLeftovers(t, c) {
			if slices.Contains(operators[name], l) {
				found[l] = true
				continue
			}
			left = append(left, l)
		}
		if len(left) > 0 {
			t.Errorf("%s: left behind: %s", name, strings.Join(left, "; "))
		}
		for _, o := range operators[name] {
			if !found[o] {
				t.Errorf("%s: the operator's %s was deleted", name, o)
			}
		}
		cm := &corev1.ConfigMap{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: userNamespace, Name: "keep-me"}, cm); err != nil || string(cm.UID) != userUIDs[name] || cm.DeletionTimestamp != nil {
			t.Errorf("%s: the user's ConfigMap %s/keep-me was touched: %v", name, userNamespace, err)
		}
	}
	if haveUserSecret {
		if err := up.Get(t.Context(), userSecret, &corev1.Secret{}); err != nil {
			t.Errorf("the user's kubeconfig Secret %s was touched: %v", userSecret, err)
		}
	}
	// What a Bundle deployed is not the uninstall's (docs/operations.md
	// "Uninstall"); say what became of it.
	for _, name := range []string{"dev-1", "dev-2"} {
		_, err := clientset(t, name).AppsV1().Deployments("hello").Get(t.Context(), "hello", metav1.GetOptions{})
		t.Logf("%s: the hello Bundle's Deployment after the uninstall: %v (nil: still there)", name, err)
	}
}

func clientFor(t *testing.T, name string) client.Client {
	t.Helper()
	c, err := devenv.Client(cluster(name))
	must(t, err)
	return c
}

// fleetLeftovers lists, by name, whatever of fleet a cluster still holds,
// and every namespace stuck Terminating. The names are fleet's as the docs
// list them, not the uninstall's own rules, so a rule that misses something
// shows here.
func fleetLeftovers(t *testing.T, c client.Client) []string {
	t.Helper()
	var left []string
	fleetNamespaces := []string{"cattle-fleet-system", "cattle-fleet-clusters-system", "fleet-local", "cattle-impersonation-system"}
	nss := &corev1.NamespaceList{}
	must(t, c.List(t.Context(), nss))
	for _, ns := range nss.Items {
		if ns.DeletionTimestamp != nil {
			left = append(left, "namespace "+ns.Name+" Terminating")
		}
		for _, f := range fleetNamespaces {
			if ns.Name == f {
				left = append(left, "namespace "+ns.Name)
			}
		}
		if strings.HasPrefix(ns.Name, "cluster-") {
			left = append(left, "namespace "+ns.Name)
		}
	}
	byName := func(group, version, kind string, match func(name string, o *unstructured.Unstructured) bool) {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: version, Kind: kind + "List"})
		if err := c.List(t.Context(), l); err != nil {
			if apierrors.IsNotFound(err) {
				return
			}
			t.Fatalf("listing %s: %v", kind, err)
		}
		for i := range l.Items {
			o := &l.Items[i]
			if match(o.GetName(), o) {
				left = append(left, fmt.Sprintf("%s %s", kind, o.GetName()))
			}
		}
	}
	fleetName := func(name string, _ *unstructured.Unstructured) bool {
		return strings.HasPrefix(name, "fleet-") || strings.HasPrefix(name, "fleet:") || strings.HasPrefix(name, "cattle-impersonation-")
	}
	byName("apiextensions.k8s.io", "v1", "CustomResourceDefinition", func(name string, _ *unstructured.Unstructured) bool {
		return strings.HasSuffix(name, ".fleet.cattle.io")
	})
	byName("apiregistration.k8s.io", "v1", "APIService", func(name string, _ *unstructured.Unstructured) bool {
		return strings.Contains(name, "fleet.cattle.io")
	})
	byName("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", fleetName)
	byName("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding", fleetName)
	byName("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", fleetName)
	byName("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", fleetName)
	byName("rbac.authorization.k8s.io", "v1", "ClusterRole", fleetName)
	byName("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", fleetName)
	byName("scheduling.k8s.io", "v1", "PriorityClass", fleetName)
	// Namespaced leftovers in namespaces that stay (kube-system's
	// RoleBinding of fleet-proxy, a workspace's token RBAC).
	byName("rbac.authorization.k8s.io", "v1", "RoleBinding", func(name string, o *unstructured.Unstructured) bool {
		return fleetName(name, o) || strings.HasPrefix(name, "import-")
	})
	byName("rbac.authorization.k8s.io", "v1", "Role", func(name string, o *unstructured.Unstructured) bool {
		return fleetName(name, o) || strings.HasPrefix(name, "import-")
	})
	byName("", "v1", "ServiceAccount", func(name string, o *unstructured.Unstructured) bool {
		return fleetName(name, o) || strings.HasPrefix(name, "import-")
	})
	byName("", "v1", "ConfigMap", fleetName)
	byName("", "v1", "Secret", func(name string, o *unstructured.Unstructured) bool {
		typ, _, _ := unstructured.NestedString(o.Object, "type")
		return fleetName(name, o) || name == "local-cluster" || strings.HasPrefix(typ, "fleet.cattle.io/")
	})
	return left
}
