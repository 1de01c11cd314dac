package agent_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/bundle"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// registeredAgent registers one agent with labels into a new workspace and
// returns the workspace, the downstream and the Cluster's name.
func registeredAgent(t *testing.T, prefix string, i int, labels map[string]any) (string, *controlplane.ControlPlane, string) {
	t.Helper()
	ws := testenv.Namespace(t, up, prefix)
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	ds := envDownstream(i)
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": ws, "labels": labels})
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	return ws, ds, name
}

// manifestBundle is a plain-manifest Bundle as `fleet apply` writes it:
// empty ignore and correctDrift at the top and in its target.
func manifestBundle(ws, name, ns string, opts fleet.BundleDeploymentOptions, files ...fleet.BundleResource) *fleet.Bundle {
	opts.DefaultNamespace = ns
	opts.IgnoreOptions = &fleet.IgnoreOptions{}
	opts.CorrectDrift = &fleet.CorrectDrift{}
	return &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: opts,
			Resources:               files,
			Targets: []fleet.BundleTarget{{
				Name:                    "default",
				ClusterSelector:         &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
				BundleDeploymentOptions: fleet.BundleDeploymentOptions{IgnoreOptions: &fleet.IgnoreOptions{}},
			}},
		},
	}
}

func cmFile(name string) fleet.BundleResource {
	return fleet.BundleResource{Name: name + ".yaml", Content: fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  k: v\n", name)}
}

func nsGoneOrGoing(t *testing.T, ds *controlplane.ControlPlane, name string) bool {
	t.Helper()
	ns := &corev1.Namespace{}
	err := ds.Client.Get(t.Context(), client.ObjectKey{Name: name}, ns)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err) || ns.DeletionTimestamp != nil
}

// TestBundle_DeleteNamespaceEndToEnd: a Bundle with deleteNamespace takes
// its namespace downstream with it, when it is deleted and when its
// cluster leaves its targets; a Bundle without keeps its namespace.
func TestBundle_DeleteNamespaceEndToEnd(t *testing.T) {
	ws, ds, cluster := registeredAgent(t, "fleet-ns-", 0, map[string]any{"env": "prod"})
	gone, kept, leaving := "gone-"+ws, "kept-"+ws, "leaving-"+ws
	for _, b := range []*fleet.Bundle{
		manifestBundle(ws, "gone", gone, fleet.BundleDeploymentOptions{DeleteNamespace: true}, cmFile("gone")),
		manifestBundle(ws, "kept", kept, fleet.BundleDeploymentOptions{}, cmFile("kept")),
		manifestBundle(ws, "leaving", leaving, fleet.BundleDeploymentOptions{DeleteNamespace: true}, cmFile("leaving")),
	} {
		if err := up.Create(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "the three bundles deployed", func() error {
		for _, c := range [][2]string{{gone, "gone"}, {kept, "kept"}, {leaving, "leaving"}} {
			if _, err := configMap(t, ds, c[0], c[1]); err != nil {
				return err
			}
		}
		return nil
	})

	for _, n := range []string{"gone", "kept"} {
		if err := up.Delete(t.Context(), &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	took := testenv.Eventually(t, 60*time.Second, "deleteNamespace bundle's namespace deleted", func() (bool, error) {
		_, err := configMap(t, ds, kept, "kept")
		return nsGoneOrGoing(t, ds, gone) && apierrors.IsNotFound(err), nil
	})
	t.Logf("namespace deleted %s after the Bundle", took)
	if nsGoneOrGoing(t, ds, kept) {
		t.Error("the namespace of a Bundle without deleteNamespace was deleted")
	}

	// The cluster leaves the Bundle's targets.
	updateCluster(t, ws, cluster, func(c *fleet.Cluster) { c.Labels["env"] = "staging" })
	testenv.Eventually(t, 60*time.Second, "namespace deleted when the cluster left the targets", func() (bool, error) {
		return nsGoneOrGoing(t, ds, leaving), nil
	})
}

// TestBundle_DownstreamResourcesEndToEnd: a Secret and a ConfigMap of the
// Bundle's namespace are copied into the cluster, a change of the source
// copied again, and they go with the Bundle; the Secret's data is never in
// the BundleDeployment or a status. A credential of the upstream is never
// copied.
func TestBundle_DownstreamResourcesEndToEnd(t *testing.T) {
	ws, ds, _ := registeredAgent(t, "fleet-copy-", 1, map[string]any{"env": "prod"})
	appNS := "copies-" + ws
	password := "s3cret-" + ws
	src := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "creds"}, StringData: map[string]string{"password": password}}
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "settings"}, Data: map[string]string{"color": "blue"}}
	for _, o := range []client.Object{src, settings} {
		if err := up.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	b := manifestBundle(ws, "app", appNS, fleet.BundleDeploymentOptions{
		DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "creds"}, {Kind: "ConfigMap", Name: "settings"}},
	}, cmFile("app"))
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	copied := func(want string) func() error {
		return func() error {
			s := &corev1.Secret{}
			if err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: appNS, Name: "creds"}, s); err != nil {
				return err
			}
			if string(s.Data["password"]) != want {
				return fmt.Errorf("downstream password %q", s.Data["password"])
			}
			cm, err := configMap(t, ds, appNS, "settings")
			if err != nil || cm.Data["color"] != "blue" {
				return fmt.Errorf("settings %v (%v)", cm.Data, err)
			}
			return nil
		}
	}
	took := testenv.Eventually(t, 60*time.Second, "secret and configmap copied downstream", copied(password))
	t.Logf("copied in %s", took)

	// The source changes: copied again.
	src.StringData = map[string]string{"password": password + "-2"}
	if err := up.Update(t.Context(), src); err != nil {
		t.Fatal(err)
	}
	took = testenv.Eventually(t, 60*time.Second, "changed secret copied again", copied(password+"-2"))
	t.Logf("re-copied %s after the change", took)

	// Never in a BundleDeployment (spec or status) nor the Bundle's status.
	bds := &fleet.BundleDeploymentList{}
	if err := up.List(t.Context(), bds, client.MatchingLabels{fleet.BundleLabel: "app", fleet.BundleNamespaceLabel: ws}); err != nil || len(bds.Items) != 1 {
		t.Fatalf("bundledeployments %d (%v)", len(bds.Items), err)
	}
	raw, _ := json.Marshal(bds.Items[0])
	braw, _ := json.Marshal(bundleStatus(t, ws, "app"))
	for _, secret := range []string{password, password + "-2"} {
		for _, form := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret))} {
			if strings.Contains(string(raw), form) || strings.Contains(string(braw), form) {
				t.Errorf("secret data in the BundleDeployment or Bundle: %s", form)
			}
		}
	}

	// A credential of the upstream (a Cluster's kubeconfig Secret) is
	// refused with a reason that names it, and nothing of it is copied.
	kc := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "kubeconfig-other"}, StringData: map[string]string{"value": "kubeconfig-" + ws}}
	if err := up.Create(t.Context(), kc); err != nil {
		t.Fatal(err)
	}
	other := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "other"}, Spec: fleet.ClusterSpec{KubeConfigSecret: "kubeconfig-other"}}
	if err := up.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	thief := manifestBundle(ws, "thief", appNS, fleet.BundleDeploymentOptions{
		DownstreamResources: []fleet.DownstreamResource{{Kind: "secret", Name: "kubeconfig-other"}},
	}, cmFile("thief"))
	if err := up.Create(t.Context(), thief); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "copy of a kubeconfig Secret refused", func() error {
		got := bundleStatus(t, ws, "thief")
		c := meta.FindStatusCondition(got.Status.Conditions, fleet.ReadyCondition)
		if c == nil || c.Reason != bundle.DownstreamResourceInvalidReason || !strings.Contains(c.Message, "kubeconfig-other") {
			return fmt.Errorf("conditions %+v", got.Status.Conditions)
		}
		if strings.Contains(c.Message, "kubeconfig-"+ws) {
			t.Errorf("the refusal holds the Secret's data: %s", c.Message)
		}
		return nil
	})
	if err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: appNS, Name: "kubeconfig-other"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the kubeconfig Secret reached the cluster: %v", err)
	}

	// The Bundle goes: so do the copies.
	if err := up.Delete(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "copies pruned with the Bundle", func() (bool, error) {
		err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: appNS, Name: "creds"}, &corev1.Secret{})
		_, cerr := configMap(t, ds, appNS, "settings")
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(cerr), nil
	})
}

// TestBundle_AtomicEndToEnd: a Bundle change whose workload does not become
// ready within helm.timeoutSeconds goes back, with helm.atomic, to what the
// cluster ran before, and the Bundle's status says so.
func TestBundle_AtomicEndToEnd(t *testing.T) {
	ws, ds, _ := registeredAgent(t, "fleet-atomic-", 0, map[string]any{"env": "prod"})
	appNS := "atomic-" + ws
	settings := func(v string) fleet.BundleResource {
		return fleet.BundleResource{Name: "settings.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  version: " + v + "\n"}
	}
	b := manifestBundle(ws, "app", appNS, fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Atomic: true, TimeoutSeconds: 3}}, settings("v1"))
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "v1 Ready", func() error {
		if got := bundleStatus(t, ws, "app"); got.Status.Display.ReadyClusters != "1/1" {
			return fmt.Errorf("readyClusters %q", got.Status.Display.ReadyClusters)
		}
		return nil
	})

	// v2 adds a Deployment that cannot become available (no kubelet here).
	updateBundle(t, ws, "app", func(b *fleet.Bundle) {
		b.Spec.Resources = []fleet.BundleResource{settings("v2"), {Name: "web.yaml", Content: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: example.invalid/web:2
`}}
	})
	took := testenv.Eventually(t, 90*time.Second, "v2 went back to v1", func() error {
		bds := &fleet.BundleDeploymentList{}
		if err := up.List(t.Context(), bds, client.MatchingLabels{fleet.BundleLabel: "app", fleet.BundleNamespaceLabel: ws}); err != nil || len(bds.Items) != 1 {
			return fmt.Errorf("bundledeployments %d (%v)", len(bds.Items), err)
		}
		c := meta.FindStatusCondition(bds.Items[0].Status.Conditions, fleet.ReadyCondition)
		if c == nil || c.Reason != "RolledBack" {
			return fmt.Errorf("ready %+v", c)
		}
		cm, err := configMap(t, ds, appNS, "settings")
		if err != nil || cm.Data["version"] != "v1" {
			return fmt.Errorf("settings %v (%v)", cm.Data, err)
		}
		return nil
	})
	t.Logf("went back %s after the change", took)
	testenv.Eventually(t, 30*time.Second, "the Bundle's status says it went back", func() error {
		got := bundleStatus(t, ws, "app")
		if got.Status.Summary.Ready != 0 || !strings.Contains(fmt.Sprint(got.Status.Summary.NonReadyResources), "went back to deployment") {
			return fmt.Errorf("summary %+v", got.Status.Summary)
		}
		return nil
	})
}
