package agent_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
)

// strict is kubectl's default field validation: an unknown or duplicate
// field is an error.
var strict = client.FieldValidation("Strict")

// fixture reads one object of testdata/fleet-apply as written (no Go type
// in between, so nothing is dropped before the API server sees it), in
// namespace ns, with NAMESPACE replaced by appNS.
func fixture(t *testing.T, file, ns, appNS string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile("testdata/fleet-apply/" + file)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(string(b), "NAMESPACE", appNS)), &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetNamespace(ns)
	return u
}

// TestFleetBundles_AcceptedStrictlyAndDeployed: Bundles shaped as Fleet's
// `fleet apply` writes them (plain manifests, a kustomization at the root,
// a chart at the root; each with fleet.yaml among its resources,
// `ignore: {}` and `correctDrift: {}` at spec and in its target) are
// accepted by the real API server under strict field validation (kubectl's
// default), and the controller and a real agent deploy them as Fleet would:
// fleet.yaml and README.md are not deployed, the root chart and
// kustomization are found without options, the target's values win.
// Their statuses have Fleet's shapes.
func TestFleetBundles_AcceptedStrictlyAndDeployed(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-fixtures-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	ds := envDownstream(0)
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": ws, "labels": map[string]any{"env": "dev"}})
	a := startAgent(t, ds, agentNS, nil)
	_, cluster := waitRegistered(t, a)
	appNS := "app-" + ws

	for _, f := range []string{"manifests.yaml", "kustomize.yaml", "chart.yaml"} {
		if err := up.Create(t.Context(), fixture(t, f, ws, appNS), strict); err != nil {
			t.Fatalf("%s as Fleet writes it, created with strict field validation: %v", f, err)
		}
	}
	// Strict validation is really on: a field Fleet does not have is refused.
	typo := fixture(t, "manifests.yaml", ws, appNS)
	typo.SetName("typo")
	if err := unstructured.SetNestedField(typo.Object, map[string]any{}, "spec", "ignored"); err != nil {
		t.Fatal(err)
	}
	if err := up.Create(t.Context(), typo, strict); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("a Bundle with an unknown field was not refused under strict validation: %v", err)
	}

	want := map[string]map[string]string{
		"settings":    {"color": "blue"},
		"limits":      {"cpu": "1"},
		"web":         {"replicas": "2"},                      // the kustomization's patch
		"shop-config": {"greeting": "hello", "replicas": "2"}, // the Bundle's values, the target's over them
	}
	testenv.Eventually(t, 90*time.Second, "the fixtures' ConfigMaps downstream", func() error {
		for name, data := range want {
			cm, err := configMap(t, ds, appNS, name)
			if err != nil {
				return err
			}
			for k, v := range data {
				if cm.Data[k] != v {
					return fmt.Errorf("configmap %s: data %v, want %v", name, cm.Data, data)
				}
			}
			if name == "web" && cm.Labels["team"] != "web" {
				return fmt.Errorf("configmap web: labels %v, want the kustomization's team=web", cm.Labels)
			}
		}
		return nil
	})
	for _, b := range []string{"fixtures-manifests", "fixtures-kustomize", "fixtures-chart"} {
		testenv.Eventually(t, 60*time.Second, "bundle "+b+" ready", func() error {
			s := bundleStatus(t, ws, b).Status
			if s.Summary.Ready != 1 || s.Summary.DesiredReady != 1 {
				return fmt.Errorf("summary %+v", s.Summary)
			}
			return nil
		})
	}

	// Only the manifests: fleet.yaml and README.md did not land, and the
	// Bundle lists what it deploys.
	b := bundleStatus(t, ws, "fixtures-manifests")
	if got := fmt.Sprint(b.Status.ResourceKey); got != "[{ConfigMap v1  limits} {ConfigMap v1  settings}]" {
		t.Errorf("status.resourceKey = %s, want the two ConfigMaps", got)
	}
	testenv.Eventually(t, 30*time.Second, "resourceCounts of fixtures-manifests", func() error {
		rc := bundleStatus(t, ws, "fixtures-manifests").Status.ResourceCounts
		if rc != (fleet.ResourceCounts{Ready: 2, DesiredReady: 2}) {
			return fmt.Errorf("bundle resourceCounts %+v, want 2 ready of 2", rc)
		}
		return nil
	})
	bd := &fleet.BundleDeployment{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: names.ClusterNamespace(ws, cluster), Name: "fixtures-chart"}, bd); err != nil {
		t.Fatal(err)
	}
	if rc := bd.Status.ResourceCounts; rc != (fleet.ResourceCounts{Ready: 1, DesiredReady: 1}) {
		t.Errorf("bundledeployment resourceCounts %+v, want 1 ready of 1", rc)
	}
	if len(bd.Status.Resources) != 1 || bd.Status.Resources[0].CreatedAt == nil {
		t.Errorf("bundledeployment resources %+v, want shop-config with its createdAt", bd.Status.Resources)
	}

	// Changed downstream and not healthy: the summary object and the counts.
	testenv.Eventually(t, 30*time.Second, "the chart's ConfigMap deleted downstream", func() error {
		cm, err := configMap(t, ds, appNS, "shop-config")
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return ds.Client.Delete(t.Context(), cm)
	})
	testenv.Eventually(t, 90*time.Second, "the deleted ConfigMap reported missing", func() error {
		bd := &fleet.BundleDeployment{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: names.ClusterNamespace(ws, cluster), Name: "fixtures-chart"}, bd); err != nil {
			return err
		}
		rc := bd.Status.ResourceCounts
		if rc.Missing != 1 || rc.DesiredReady != 1 || rc.Ready != 0 {
			return fmt.Errorf("resourceCounts %+v, nonReadyStatus %+v", rc, bd.Status.NonReadyStatus)
		}
		for _, nr := range bd.Status.NonReadyStatus {
			if nr.Name == "shop-config" && (nr.Summary.State != "missing" || !nr.Summary.Error) {
				return fmt.Errorf("nonReadyStatus summary %+v, want state missing, error", nr.Summary)
			}
		}
		return nil
	})
}

// TestFleetBundleDeployment_AcceptedStrictly: a BundleDeployment as Fleet's
// controller writes it, and its status as Fleet's agent reports it, are
// accepted under strict field validation and read back with Fleet's
// shapes.
func TestFleetBundleDeployment_AcceptedStrictly(t *testing.T) {
	ns := testenv.Namespace(t, up, "fleet-fixture-bd-")
	u := fixture(t, "bundledeployment.yaml", ns, "shop")
	st := u.Object["status"]
	if err := up.Create(t.Context(), u, strict); err != nil {
		t.Fatalf("the BundleDeployment as Fleet writes it, created with strict field validation: %v", err)
	}
	u.Object["status"] = st
	if err := up.Status().Update(t.Context(), u, strict); err != nil {
		t.Fatalf("the status as Fleet's agent writes it, with strict field validation: %v", err)
	}
	bd := &fleet.BundleDeployment{}
	if err := up.Get(t.Context(), client.ObjectKeyFromObject(u), bd); err != nil {
		t.Fatal(err)
	}
	s := bd.Status
	if len(s.NonReadyStatus) != 1 || s.NonReadyStatus[0].Summary.State != "in-progress" || !s.NonReadyStatus[0].Summary.Transitioning ||
		s.NonReadyStatus[0].UID == "" || len(s.NonReadyStatus[0].Summary.Message) != 1 {
		t.Errorf("nonReadyStatus %+v", s.NonReadyStatus)
	}
	if s.ResourceCounts.Missing != 1 || s.ResourceCounts.DesiredReady != 3 || s.Release != "shop/shop:3" ||
		len(s.ModifiedStatus) != 1 || !s.ModifiedStatus[0].Exist || len(s.Resources) != 2 || s.Resources[0].CreatedAt == nil {
		t.Errorf("status %+v", s)
	}
	if bd.Spec.Options.Helm == nil || fmt.Sprint(bd.Spec.Options.Helm.Values.Data["replicas"]) != "2" || bd.Spec.Options.IgnoreOptions == nil {
		t.Errorf("spec.options %+v", bd.Spec.Options)
	}
}
