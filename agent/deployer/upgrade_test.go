package deployer

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// TestStatusOfThePreviousReleaseIsReadAndOverwritten: a BundleDeployment
// whose status the previous release wrote (nonReadyStatus[].summary a
// string, under the previous CRD) still decodes after the CRD upgrade, and
// the agent's status writer (reconciler.StatusPatcher) replaces it with
// the object shape, without errors. The previous CRD is
// testdata/previous-release (charts/fleet/crds of commit a38fbcf).
func TestStatusOfThePreviousReleaseIsReadAndOverwritten(t *testing.T) {
	dir := t.TempDir()
	old, err := os.ReadFile("testdata/previous-release/fleet.cattle.io_bundledeployments.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "crd.yaml"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	cpEnv, err := controlplane.Start(t.Context(), controlplane.Options{ManifestDirs: []string{dir}, NoControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cpEnv.Stop() })
	c := cpEnv.Upstream.Client

	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cluster-ns"}}); err != nil {
		t.Fatal(err)
	}
	bd := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-ns", Name: "app"}, Spec: fleet.BundleDeploymentSpec{DeploymentID: "m:o"}}
	if err := c.Create(t.Context(), bd); err != nil {
		t.Fatal(err)
	}
	legacy := []byte(`{"status":{"display":{"state":"NotReady"},"nonReadyStatus":[{"apiVersion":"apps/v1","kind":"Deployment","namespace":"web","name":"web","summary":"InProgress: Deployment not ready: 0/1"}]}}`)
	if err := c.Status().Patch(t.Context(), bd, client.RawPatch(types.MergePatchType, legacy)); err != nil {
		t.Fatalf("the previous release's status under its CRD: %v", err)
	}

	// The CRD upgrade (what `kubectl apply -f charts/fleet/crds` does).
	b, err := os.ReadFile("../../charts/fleet/crds/fleet.cattle.io_bundledeployments.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		t.Fatal(err)
	}
	cur := &apiextv1.CustomResourceDefinition{}
	if err := c.Get(t.Context(), client.ObjectKey{Name: crd.Name}, cur); err != nil {
		t.Fatal(err)
	}
	crd.ResourceVersion = cur.ResourceVersion
	if err := c.Update(t.Context(), crd); err != nil {
		t.Fatal(err)
	}
	// The new schema is served once a field only it has is kept.
	testenv.Eventually(t, 30*time.Second, "the new CRD served", func() error {
		probe := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-ns", Name: fmt.Sprintf("probe-%d", time.Now().UnixNano())}}
		if err := c.Create(t.Context(), probe); err != nil {
			return err
		}
		if err := c.Status().Patch(t.Context(), probe, client.RawPatch(types.MergePatchType, []byte(`{"status":{"release":"x"}}`))); err != nil {
			return err
		}
		if probe.Status.Release != "x" {
			return fmt.Errorf("status.release pruned: the old schema is still served")
		}
		return nil
	})

	// Read: the string decodes into the object it stands for.
	got := &fleet.BundleDeployment{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(bd), got); err != nil {
		t.Fatalf("reading the previous release's status with the new types: %v", err)
	}
	if s := got.Status.NonReadyStatus[0].Summary; s.State != "in-progress" || !s.Transitioning || len(s.Message) != 1 {
		t.Fatalf("legacy summary decoded as %+v", s)
	}
	// A status write that leaves nonReadyStatus as it was is accepted
	// (the stored string is not validated again: CRD validation ratcheting).
	patcher, err := reconciler.NewStatusPatcher(c, got)
	if err != nil {
		t.Fatal(err)
	}
	got.Status.Display.Monitored = "Yes"
	if err := patcher.Patch(t.Context(), got); err != nil {
		t.Fatalf("a status write not touching the old summary: %v", err)
	}
	// The agent's next health check writes the object shape over it.
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(bd), got); err != nil {
		t.Fatal(err)
	}
	if patcher, err = reconciler.NewStatusPatcher(c, got); err != nil {
		t.Fatal(err)
	}
	got.Status.NonReadyStatus[0].Summary = fleet.SummaryOf("InProgress", "Deployment not ready: 1/2")
	got.Status.NonReadyStatus[0].UID = "u-1"
	if err := patcher.Patch(t.Context(), got); err != nil {
		t.Fatalf("the agent's status write over the old summary: %v", err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(fleet.GroupVersion.WithKind("BundleDeployment"))
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(bd), u); err != nil {
		t.Fatal(err)
	}
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "nonReadyStatus")
	var raw map[string]any
	if len(list) == 1 {
		raw, _ = list[0].(map[string]any)
	}
	if s, ok := raw["summary"].(map[string]any); !ok || s["state"] != "in-progress" || raw["uid"] != "u-1" {
		t.Errorf("stored nonReadyStatus[0] %v, want the object shape", raw)
	}
}
