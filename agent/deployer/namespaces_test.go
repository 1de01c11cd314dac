package deployer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// goneOrGoing reports whether a namespace is deleted or being deleted.
func (f *fixture) goneOrGoing(name string) bool {
	ns := namespace(name)
	return !f.exists(ns) || ns.DeletionTimestamp != nil
}

func failedWith(reason string) func(*fleet.BundleDeployment) bool {
	return func(bd *fleet.BundleDeployment) bool {
		c := condition(bd, fleet.DeployedCondition)
		return c.Status == metav1.ConditionFalse && c.Reason == reason
	}
}

// deleteNamespace: the target namespace goes with the deleted
// BundleDeployment; without it, or while another BundleDeployment still
// deploys into it, or with keepResources, it stays.
func TestDeployer_DeleteNamespaceWithTheBundleDeployment(t *testing.T) {
	f := newFixture(t)
	gone, kept, shared := "gone-"+f.suffix, "kept-"+f.suffix, "shared-"+f.suffix
	deploy := func(name, ns string, del bool) {
		opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, DeleteNamespace: del}
		id := f.deploy(name, configMapYAML(name, "1"), opts)
		f.waitBD(name, 30*time.Second, "Ready", readyFor(id))
	}
	deploy("gone", gone, true)
	deploy("kept", kept, false)
	deploy("first", shared, true)
	deploy("second", shared, false)
	for _, n := range []string{"gone", "kept", "first"} {
		if err := f.up.Delete(t.Context(), f.getBD(n)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "namespace of the deleteNamespace bundle deleted", func() (bool, error) {
		return f.goneOrGoing(gone) && !f.exists(cm(f.agentNS, InventoryName("gone"))), nil
	})
	testenv.Eventually(t, 30*time.Second, "the other deleted BundleDeployments pruned", func() (bool, error) {
		return !f.exists(cm(kept, "kept")) && !f.exists(cm(shared, "first")) &&
			!f.exists(cm(f.agentNS, InventoryName("kept"))) && !f.exists(cm(f.agentNS, InventoryName("first"))), nil
	})
	if f.goneOrGoing(kept) {
		t.Error("the namespace of a bundle without deleteNamespace was deleted")
	}
	if f.goneOrGoing(shared) || !f.exists(cm(shared, "second")) {
		t.Error("a namespace another BundleDeployment deploys into was deleted")
	}

	// The last one out with deleteNamespace takes it; keepResources wins
	// over deleteNamespace.
	keep := "keep-" + f.suffix
	id := f.deploy("keep", configMapYAML("keep", "1"), fleet.BundleDeploymentOptions{DefaultNamespace: keep, DeleteNamespace: true, KeepResources: true})
	f.waitBD("keep", 30*time.Second, "Ready", readyFor(id))
	id = f.deploy("second", configMapYAML("second", "1"), fleet.BundleDeploymentOptions{DefaultNamespace: shared, DeleteNamespace: true})
	f.waitBD("second", 30*time.Second, "Ready", readyFor(id))
	for _, n := range []string{"keep", "second"} {
		if err := f.up.Delete(t.Context(), f.getBD(n)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "shared namespace deleted with its last bundle", func() (bool, error) {
		return f.goneOrGoing(shared) && !f.exists(cm(f.agentNS, InventoryName("keep"))), nil
	})
	if f.goneOrGoing(keep) || !f.exists(cm(keep, "keep")) {
		t.Error("keepResources: the namespace and its objects must stay")
	}
}

// deleteNamespace on the agent's own namespace or a system one is refused
// before anything is applied, with a status that says what to change.
func TestDeployer_DeleteNamespaceRefusesProtectedNamespaces(t *testing.T) {
	f := newFixture(t)
	for i, ns := range []string{f.agentNS, "kube-system", "default"} {
		name := fmt.Sprintf("protected-%d", i)
		cmName := name + "-" + f.suffix
		opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, DeleteNamespace: true}
		if ns == f.agentNS {
			opts = fleet.BundleDeploymentOptions{TargetNamespace: ns, DeleteNamespace: true}
		}
		f.deploy(name, configMapYAML(cmName, "1"), opts)
		bd, _ := f.waitBD(name, 30*time.Second, "refused", failedWith(NamespaceProtectedReason))
		msg := condition(bd, fleet.DeployedCondition).Message
		if !strings.Contains(msg, "deleteNamespace: namespace "+ns+" is never deleted") || !strings.Contains(msg, "remove deleteNamespace") {
			t.Errorf("%s: message %q", ns, msg)
		}
		if f.exists(cm(ns, cmName)) {
			t.Errorf("%s: applied although refused", ns)
		}
		if err := f.up.Delete(t.Context(), bd); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{f.agentNS, "kube-system", "default"} {
		if f.goneOrGoing(ns) {
			t.Fatalf("namespace %s deleted", ns)
		}
	}
}

// createNamespace: false requires the target namespace: nothing is applied
// while it is missing (the status says so), and the deployment goes on
// once an admin made it. Without it the namespace is made as before.
func TestDeployer_CreateNamespaceFalseRequiresTheNamespace(t *testing.T) {
	f := newFixture(t)
	ns := "required-" + f.suffix
	id := f.deploy("app", configMapYAML("app", "1"), fleet.BundleDeploymentOptions{DefaultNamespace: ns, CreateNamespace: ptr.To(false)})
	bd, _ := f.waitBD("app", 30*time.Second, "waiting for the namespace", failedWith(NamespaceMissingReason))
	if msg := condition(bd, fleet.DeployedCondition).Message; !strings.Contains(msg, "namespace "+ns+" does not exist downstream and createNamespace is false") {
		t.Errorf("message %q", msg)
	}
	if f.exists(namespace(ns)) {
		t.Fatal("the namespace was created although createNamespace is false")
	}
	if err := f.down.Create(t.Context(), namespace(ns)); err != nil {
		t.Fatal(err)
	}
	_, took := f.waitBD("app", 30*time.Second, "Ready once the namespace exists", readyFor(id))
	t.Logf("applied %s after the namespace was made", took)

	made := "made-" + f.suffix
	id = f.deploy("made", configMapYAML("made", "1"), fleet.BundleDeploymentOptions{DefaultNamespace: made, CreateNamespace: ptr.To(true)})
	f.waitBD("made", 30*time.Second, "Ready", readyFor(id))
	if !f.exists(cm(made, "made")) {
		t.Error("createNamespace: true must make the namespace")
	}
}

func crdYAML(group string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.%[1]s
spec:
  group: %[1]s
  names: {kind: Gizmo, plural: gizmos, singular: gizmo, listKind: GizmoList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, group)
}

func (f *fixture) crdExists(group string) bool {
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crd.SetName("gizmos." + group)
	return f.exists(crd) && crd.GetDeletionTimestamp() == nil
}

// CRDs stay downstream by default when they leave the bundle or their
// BundleDeployment is deleted (their deletion would delete every object of
// their kind); deleteCRDResources deletes them with the BundleDeployment.
func TestDeployer_CRDsStayUnlessDeleteCRDResources(t *testing.T) {
	f := newFixture(t)
	ns := "crds-" + f.suffix
	keepGroup, delGroup, leaveGroup := "k"+f.suffix+".example.com", "d"+f.suffix+".example.com", "l"+f.suffix+".example.com"
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	id := f.deploy("keep", docs(crdYAML(keepGroup), crdYAML(leaveGroup), configMapYAML("keep", "1")), opts)
	f.waitBD("keep", 60*time.Second, "Ready", readyFor(id))
	del := opts
	del.DeleteCRDResources = true
	id = f.deploy("del", docs(crdYAML(delGroup), configMapYAML("del", "1")), del)
	f.waitBD("del", 60*time.Second, "Ready", readyFor(id))

	// A CRD leaves the bundle: kept, and no longer in the inventory.
	id = f.deploy("keep", docs(crdYAML(keepGroup), configMapYAML("keep", "1")), opts)
	bd, _ := f.waitBD("keep", 60*time.Second, "Ready", readyFor(id))
	if !f.crdExists(leaveGroup) || len(bd.Status.Resources) != 2 {
		t.Errorf("a CRD that left the bundle must stay (resources %v)", bd.Status.Resources)
	}

	for _, n := range []string{"keep", "del"} {
		if err := f.up.Delete(t.Context(), f.getBD(n)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "deleteCRDResources: CRD deleted", func() (bool, error) {
		return !f.crdExists(delGroup) && !f.exists(cm(f.agentNS, InventoryName("keep"))), nil
	})
	if !f.crdExists(keepGroup) || !f.crdExists(leaveGroup) {
		t.Error("CRDs of a bundle without deleteCRDResources were deleted")
	}
	if f.exists(cm(ns, "keep")) {
		t.Error("the other objects of the deleted BundleDeployment must be pruned")
	}
}

// helm.force: a change of an immutable field is applied by deleting and
// recreating the object; without it the deployment fails and says so.
func TestDeployer_HelmForceRecreatesOnImmutableChange(t *testing.T) {
	f := newFixture(t)
	ns := "force-" + f.suffix
	immutable := func(v string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: frozen\nimmutable: true\ndata:\n  key: %q\n", v)
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	id := f.deploy("frozen", immutable("1"), opts)
	f.waitBD("frozen", 30*time.Second, "Ready", readyFor(id))
	before := cm(ns, "frozen")
	f.exists(before)

	f.deploy("frozen", immutable("2"), opts)
	bd, _ := f.waitBD("frozen", 30*time.Second, "apply failed", failedWith(fleet.ApplyFailedReason))
	if msg := condition(bd, fleet.DeployedCondition).Message; !strings.Contains(msg, "immutable") {
		t.Errorf("message %q should say the field is immutable", msg)
	}

	opts.Helm = &fleet.HelmOptions{Force: true}
	id = f.deploy("frozen", immutable("2"), opts)
	f.waitBD("frozen", 30*time.Second, "Ready with force", readyFor(id))
	after := cm(ns, "frozen")
	if !f.exists(after) || after.Data["key"] != "2" || after.UID == before.UID {
		t.Errorf("want a recreated configmap with key 2: uid %s → %s, data %v", before.UID, after.UID, after.Data)
	}
}
