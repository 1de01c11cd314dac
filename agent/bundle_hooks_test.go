package agent_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// TestBundle_HooksAndCRDsEndToEnd: a chart with crds/, a custom resource of
// that CRD, pre-install/pre-upgrade and post-install hooks, rendered by the
// controller (in a render worker) and applied by an agent: the CRD and the
// custom resource land, the install hooks run, the upgrade hook runs only
// on the next deployment, and only the CRD and the main objects are the
// BundleDeployment's resources.
func TestBundle_HooksAndCRDsEndToEnd(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-hooks-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	ds := envDownstream(0)
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": ws, "labels": map[string]any{"env": "hooks"}})
	a := startAgent(t, ds, agentNS, nil)
	waitRegistered(t, a)
	appNS := "app-" + ws
	group := ws + ".example.com"

	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "hooked"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace: appNS,
				Helm:             &fleet.HelmOptions{Chart: "chart", Values: &fleet.GenericMap{Data: map[string]any{"color": "blue"}}},
				IgnoreOptions:    &fleet.IgnoreOptions{},
				CorrectDrift:     &fleet.CorrectDrift{},
			},
			Resources: []fleet.BundleResource{
				{Name: "chart/Chart.yaml", Content: "apiVersion: v2\nname: hooked\nversion: 0.1.0\n"},
				{Name: "chart/crds/gadgets.yaml", Content: fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.%[1]s
spec:
  group: %[1]s
  names: {kind: Gadget, plural: gadgets, singular: gadget, listKind: GadgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`, group)},
				{Name: "chart/templates/gadget.yaml", Content: "apiVersion: " + group + "/v1\nkind: Gadget\nmetadata:\n  name: g\nspec:\n  color: {{ .Values.color }}\n"},
				{Name: "chart/templates/config.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config\ndata:\n  color: {{ .Values.color }}\n"},
				{Name: "chart/templates/hooks.yaml", Content: `apiVersion: v1
kind: ConfigMap
metadata:
  name: installed
  annotations: {helm.sh/hook: pre-install, helm.sh/hook-weight: "-5"}
data:
  color: {{ .Values.color }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: upgraded-to-{{ .Values.color }}
  annotations: {helm.sh/hook: pre-upgrade}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: after-install
  annotations: {helm.sh/hook: post-install}
---
apiVersion: v1
kind: Pod
metadata:
  name: smoke-test
  annotations: {helm.sh/hook: test}
spec:
  containers: [{name: c, image: registry.invalid/test:1}]
`},
			},
			Targets: []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "hooks"}}}},
		},
	}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	gadget := &unstructured.Unstructured{}
	gadget.SetAPIVersion(group + "/v1")
	gadget.SetKind("Gadget")
	exists := func(o client.Object) error {
		return ds.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o)
	}
	testenv.Eventually(t, 90*time.Second, "bundle Ready 1/1 with its CRD, custom resource and install hooks", func() error {
		if got := bundleStatus(t, ws, "hooked"); got.Status.Display.ReadyClusters != "1/1" {
			return fmt.Errorf("readyClusters %q", got.Status.Display.ReadyClusters)
		}
		g := gadget.DeepCopy()
		g.SetNamespace(appNS)
		g.SetName("g")
		if err := exists(g); err != nil {
			return fmt.Errorf("gadget: %w", err)
		}
		for _, n := range []string{"config", "installed", "after-install"} {
			if _, err := configMap(t, ds, appNS, n); err != nil {
				return fmt.Errorf("configmap %s: %w", n, err)
			}
		}
		return nil
	})
	if _, err := configMap(t, ds, appNS, "upgraded-to-blue"); !apierrors.IsNotFound(err) {
		t.Errorf("the pre-upgrade hook ran on the install: %v", err)
	}
	bds := &fleet.BundleDeploymentList{}
	if err := up.List(t.Context(), bds, client.MatchingLabels{fleet.BundleLabel: "hooked", fleet.BundleNamespaceLabel: ws}); err != nil || len(bds.Items) != 1 {
		t.Fatalf("BundleDeployments of hooked: %d (%v)", len(bds.Items), err)
	}
	var res []string
	for _, r := range bds.Items[0].Status.Resources {
		res = append(res, r.Kind+" "+r.Name)
	}
	slices.Sort(res)
	if want := []string{"ConfigMap config", "CustomResourceDefinition gadgets." + group, "Gadget g"}; !slices.Equal(res, want) {
		t.Errorf("status.resources = %v, want %v (the chart's CRD and main objects, no hooks)", res, want)
	}

	// The next deployment is an upgrade.
	updateBundle(t, ws, "hooked", func(b *fleet.Bundle) { b.Spec.Helm.Values.Data["color"] = "green" })
	testenv.Eventually(t, 90*time.Second, "pre-upgrade hook run and the upgrade applied", func() error {
		if _, err := configMap(t, ds, appNS, "upgraded-to-green"); err != nil {
			return fmt.Errorf("pre-upgrade hook: %w", err)
		}
		cm, err := configMap(t, ds, appNS, "config")
		if err != nil || cm.Data["color"] != "green" {
			return fmt.Errorf("config %v (%v)", cm.Data, err)
		}
		return nil
	})
	if cm, err := configMap(t, ds, appNS, "installed"); err != nil || cm.Data["color"] != "blue" {
		t.Errorf("the pre-install hook ran again on the upgrade: %v (%v)", cm.Data, err)
	}
}
