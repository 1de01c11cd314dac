package agent_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// gateCRD is the Gate kind of testdata/bundleoptions: a resource whose
// readiness the test controls (its status is an ordinary field: no status
// subresource).
func gateCRD(t *testing.T, ds *controlplane.ControlPlane) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gates.deps.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "deps.example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gates", Singular: "gate", Kind: "Gate", ListKind: "GateList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
	if err := ds.Client.Create(t.Context(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "Gate CRD established", func() error {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := ds.Client.Get(t.Context(), client.ObjectKeyFromObject(crd), got); err != nil {
			return err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("not established")
	})
}

// openGate sets a Gate's Ready condition True downstream, as its operator
// would.
func openGate(t *testing.T, ds *controlplane.ControlPlane, ns, name string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "gate "+name+" opened", func() error {
		g := &unstructured.Unstructured{}
		g.SetAPIVersion("deps.example.com/v1")
		g.SetKind("Gate")
		if err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, g); err != nil {
			return err
		}
		cond := map[string]any{"type": "Ready", "status": "True", "reason": "Open"}
		if err := unstructured.SetNestedSlice(g.Object, []any{cond}, "status", "conditions"); err != nil {
			return err
		}
		return ds.Client.Update(t.Context(), g)
	})
}

// createBundle creates testdata/bundleoptions/<file> in workspace ws, its
// APPNS placeholders replaced by appNS.
func createBundle(t *testing.T, file, ws, appNS string) {
	t.Helper()
	data, err := os.ReadFile("testdata/bundleoptions/" + file)
	if err != nil {
		t.Fatal(err)
	}
	b := &fleet.Bundle{}
	if err := yaml.UnmarshalStrict([]byte(strings.ReplaceAll(string(data), "APPNS", appNS)), b); err != nil {
		t.Fatal(err)
	}
	b.Namespace = ws
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
}

// depsCluster registers one agent-initiated cluster labelled env=deps and
// returns its downstream and its cluster namespace upstream.
func depsCluster(t *testing.T, ws string) (*controlplane.ControlPlane, string) {
	t.Helper()
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	ds := envDownstream(0)
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": ws, "labels": map[string]any{"env": "deps"}})
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	var clusterNS string
	testenv.Eventually(t, 30*time.Second, "cluster namespace", func() error {
		clusterNS = getCluster(t, ws, name).Status.Namespace
		if clusterNS == "" {
			return fmt.Errorf("no namespace yet")
		}
		return nil
	})
	gateCRD(t, ds)
	return ds, clusterNS
}

func getBD(t *testing.T, ns, name string) (*fleet.BundleDeployment, error) {
	bd := &fleet.BundleDeployment{}
	err := up.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, bd)
	return bd, err
}

// bdReason is the BundleDeployment's Deployed condition reason and Ready
// message.
func bdReason(bd *fleet.BundleDeployment) (string, string) {
	var reason, msg string
	if c := meta.FindStatusCondition(bd.Status.Conditions, fleet.DeployedCondition); c != nil {
		reason = c.Reason
	}
	if c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ReadyCondition); c != nil {
		msg = c.Message
	}
	return reason, msg
}

// TestBundle_DependsOnChainDeploysInOrder: db ← api (selector tier=db) ←
// web (name api, accepted Ready or NotReady). api waits, with
// WaitingForDependency naming db, while db's Gate is not ready, and
// nothing of it is applied; web waits for api. Once db is Ready, api is
// applied promptly (the agent watches its cluster namespace's
// BundleDeployments; the fallback retry is 15s), and web once api is
// applied, though api is NotReady (accepted). The Bundles' statuses count
// the waiting ones as WaitApplied. A cycle is reported as DependencyCycle,
// a dependency that is not on the cluster as such.
func TestBundle_DependsOnChainDeploysInOrder(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-deps-")
	ds, clusterNS := depsCluster(t, ws)
	appNS := "deps-" + ws

	for _, f := range []string{"db.yaml", "api.yaml", "web.yaml"} {
		createBundle(t, f, ws, appNS)
	}
	testenv.Eventually(t, 90*time.Second, "db applied and NotReady, api and web waiting", func() error {
		db, err := getBD(t, clusterNS, "db")
		if err != nil {
			return err
		}
		if db.Labels["tier"] != "db" || db.Labels["fleet.cattle.io/repo-name"] != "deps" {
			return fmt.Errorf("db's BundleDeployment does not carry the Bundle's labels: %v", db.Labels)
		}
		if db.Status.AppliedDeploymentID != db.Spec.DeploymentID || db.Status.Display.State != string(fleet.NotReady) {
			return fmt.Errorf("db: applied %q of %q, state %q", db.Status.AppliedDeploymentID, db.Spec.DeploymentID, db.Status.Display.State)
		}
		api, err := getBD(t, clusterNS, "api")
		if err != nil {
			return err
		}
		reason, msg := bdReason(api)
		if reason != fleet.WaitingForDependencyReason || api.Status.Display.Deployed != fleet.WaitingForDependencyReason ||
			!strings.Contains(msg, "dependent bundle(s) are not ready: [db]") || !strings.Contains(msg, "db is NotReady") {
			return fmt.Errorf("api: %s %q (display %+v)", reason, msg, api.Status.Display)
		}
		web, err := getBD(t, clusterNS, "web")
		if err != nil {
			return err
		}
		if reason, msg := bdReason(web); reason != fleet.WaitingForDependencyReason || !strings.Contains(msg, "api is WaitApplied (accepted: Ready, NotReady)") {
			return fmt.Errorf("web: %s %q", reason, msg)
		}
		// Bundle aggregation: waiting counts as WaitApplied, with the reason.
		b := bundleStatus(t, ws, "api")
		if b.Status.Summary.WaitApplied != 1 || b.Status.Display.State != string(fleet.WaitApplied) {
			return fmt.Errorf("bundle api summary %+v display %+v", b.Status.Summary, b.Status.Display)
		}
		return nil
	})
	for _, name := range []string{"api", "web"} {
		if _, err := configMap(t, ds, appNS, name); !apierrors.IsNotFound(err) {
			t.Fatalf("configmap %s applied while its dependencies are not ready: %v", name, err)
		}
	}

	openGate(t, ds, appNS, "db")
	testenv.Eventually(t, 60*time.Second, "db Ready", func() error {
		db, err := getBD(t, clusterNS, "db")
		if err != nil {
			return err
		}
		if db.Status.Display.State != string(fleet.Ready) {
			return fmt.Errorf("db state %q", db.Status.Display.State)
		}
		return nil
	})
	// Promptly: well within the 15s fallback retry.
	took := testenv.Eventually(t, 12*time.Second, "api applied once db is Ready", func() error {
		_, err := configMap(t, ds, appNS, "api")
		return err
	})
	t.Logf("api applied %v after db was seen Ready", took)
	testenv.Eventually(t, 60*time.Second, "web applied while api is NotReady (accepted)", func() error {
		if _, err := configMap(t, ds, appNS, "web"); err != nil {
			return err
		}
		api, err := getBD(t, clusterNS, "api")
		if err != nil {
			return err
		}
		if api.Status.Display.State != string(fleet.NotReady) {
			return fmt.Errorf("api state %q, want NotReady (its gate is closed)", api.Status.Display.State)
		}
		web, err := getBD(t, clusterNS, "web")
		if err != nil {
			return err
		}
		if web.Status.Display.State != string(fleet.Ready) {
			return fmt.Errorf("web state %q", web.Status.Display.State)
		}
		return nil
	})

	// A cycle: ping ← pong ← ping. Both are reported, not left waiting.
	for _, p := range [][2]string{{"ping", "pong"}, {"pong", "ping"}, {"orphan", "nowhere"}} {
		b := &fleet.Bundle{
			ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: p[0]},
			Spec: fleet.BundleSpec{
				BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: appNS, IgnoreOptions: &fleet.IgnoreOptions{}, CorrectDrift: &fleet.CorrectDrift{}},
				DependsOn:               []fleet.BundleRef{{Name: p[1]}},
				Resources:               []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + p[0] + "\n"}},
				Targets:                 []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "deps"}}}},
			},
		}
		if err := up.Create(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "cycle and missing dependency reported", func() error {
		for _, want := range []struct{ name, reason, says string }{
			{"ping", fleet.DependencyCycleReason, "ping → pong → ping"},
			{"pong", fleet.DependencyCycleReason, "pong → ping → pong"},
			{"orphan", fleet.WaitingForDependencyReason, "nowhere is not deployed to this cluster"},
		} {
			bd, err := getBD(t, clusterNS, want.name)
			if err != nil {
				return err
			}
			if reason, msg := bdReason(bd); reason != want.reason || !strings.Contains(msg, want.says) {
				return fmt.Errorf("%s: %s %q, want %s saying %q", want.name, reason, msg, want.reason, want.says)
			}
		}
		if b := bundleStatus(t, ws, "ping"); b.Status.Summary.ErrApplied != 1 {
			return fmt.Errorf("bundle ping summary %+v", b.Status.Summary)
		}
		return nil
	})
}

// TestBundle_IgnoreConditionsAndComparePatches: a Gate whose Ready
// condition is False counts as ready when ignore.conditions names
// {type: Ready, status: "False"}; drift on the fields diff.comparePatches
// names (a jsonPointer, a remove operation) and a missing object an ignore
// operation names are not reported, drift on another field is.
func TestBundle_IgnoreConditionsAndComparePatches(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-opts-")
	ds, clusterNS := depsCluster(t, ws)
	appNS := "opts-" + ws

	createBundle(t, "gated.yaml", ws, appNS)
	createBundle(t, "settings.yaml", ws, appNS)
	testenv.Eventually(t, 90*time.Second, "gated and settings Ready", func() error {
		for _, name := range []string{"gated", "settings"} {
			bd, err := getBD(t, clusterNS, name)
			if err != nil {
				return err
			}
			if bd.Status.Display.State != string(fleet.Ready) {
				_, msg := bdReason(bd)
				return fmt.Errorf("%s: state %q: %s", name, bd.Status.Display.State, msg)
			}
		}
		return nil
	})

	// Drift on the ignored fields, and the ignored object deleted.
	cm, err := configMap(t, ds, appNS, "settings")
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["replicas"], cm.Data["owner"] = "5", "team-b"
	if err := ds.Client.Update(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	opt, err := configMap(t, ds, appNS, "settings-optional")
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.Client.Delete(t.Context(), opt); err != nil {
		t.Fatal(err)
	}
	// Then on a field nothing ignores: the report names it alone.
	testenv.Eventually(t, 60*time.Second, "only data.color reported modified", func() error {
		cm, err := configMap(t, ds, appNS, "settings")
		if err != nil {
			return err
		}
		if cm.Data["color"] != "red" {
			cm.Data["color"] = "red"
			if err := ds.Client.Update(t.Context(), cm); err != nil {
				return err
			}
		}
		bd, err := getBD(t, clusterNS, "settings")
		if err != nil {
			return err
		}
		m := bd.Status.ModifiedStatus
		if bd.Status.Display.State != string(fleet.Modified) || len(m) != 1 || m[0].Name != "settings" || m[0].Patch != "changed data.color" {
			return fmt.Errorf("state %q modified %+v", bd.Status.Display.State, m)
		}
		return nil
	})
	if cm, err := configMap(t, ds, appNS, "settings"); err != nil || cm.Data["replicas"] != "5" || cm.Data["owner"] != "team-b" {
		t.Errorf("the ignored fields were changed back (correctDrift is off): %v %v", cm.Data, err)
	}
}
