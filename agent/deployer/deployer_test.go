package deployer

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/names"
)

var env *controlplane.Env

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{Downstreams: 1}}, func(s *testenv.Suite) error {
		env = s.Env
		return nil
	})
}

// fixture is one test's world: a cluster namespace upstream with a request
// identity limited to what an agent may do, an agent namespace downstream,
// and a running deployer.
type fixture struct {
	t        *testing.T
	ns       string // cluster namespace upstream
	agentNS  string // agent namespace downstream
	suffix   string // unique per test, for downstream names
	cluster  string // the agent's Cluster upstream
	ws       string // its workspace
	up       client.Client
	down     client.Client
	identity *rest.Config
	opts     Options

	d   *Deployer
	run *testenv.Runner
}

func newFixture(t *testing.T, mutate ...func(*Options)) *fixture {
	t.Helper()
	if env == nil {
		t.Skip("no control planes while fuzzing")
	}
	f := &fixture{t: t, up: env.Upstream.Client, down: env.Downstreams[0].Client}
	f.ns = testenv.Namespace(t, f.up, "cluster-")
	f.agentNS = testenv.Namespace(t, f.down, "agent-")
	f.suffix = strings.TrimPrefix(f.ns, "cluster-")
	f.cluster, f.ws = f.suffix, "ws-"+f.suffix
	f.identity = requestIdentity(t, f.ns)
	f.opts = Options{
		Upstream:         f.identity,
		Namespace:        f.ns,
		Local:            env.Downstreams[0].Config,
		AgentNamespace:   f.agentNS,
		ClusterName:      f.cluster,
		ClusterNamespace: f.ws,
		ResyncInterval:   time.Second,
		HealthTimeout:    5 * time.Second,
	}
	for _, m := range mutate {
		m(&f.opts)
	}
	f.start()
	t.Cleanup(f.stop)
	return f
}

func (f *fixture) start() {
	f.t.Helper()
	d, err := New(f.opts)
	if err != nil {
		f.t.Fatal(err)
	}
	f.d, f.run = d, testenv.Go(context.Background(), "deployer", d.Run)
}

func (f *fixture) stop() {
	if f.run == nil {
		return
	}
	if err := f.run.Stop(30 * time.Second); err != nil {
		f.t.Error(err)
	}
	f.run = nil
}

// requestIdentity is a ServiceAccount token with exactly the upstream
// permissions a cluster's request identity has.
func requestIdentity(t *testing.T, ns string) *rest.Config {
	t.Helper()
	ctx := t.Context()
	c := env.Upstream.Client
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "request"}},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "request"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"bundledeployments"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"bundledeployments/status"}, Verbs: []string{"update", "patch"}},
				{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}},
			},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "request"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "request"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "request"}},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	token, err := env.Upstream.ServiceAccountToken(ctx, ns, "request", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return env.Upstream.ConfigForToken(token)
}

// deploy writes content and a BundleDeployment as the controller does: the
// Secret first, then the BundleDeployment naming it. It returns the
// deployment ID.
func (f *fixture) deploy(name, manifests string, opts fleet.BundleDeploymentOptions, mutate ...func(*fleet.BundleDeployment)) string {
	f.t.Helper()
	f.writeContent(name, manifests)
	id := bundlecontent.DeploymentID(bundlecontent.ManifestID([]byte(manifests)), opts)
	f.updateBD(name, func(bd *fleet.BundleDeployment) {
		bd.Spec.Options = opts
		bd.Spec.DeploymentID = id
		for _, m := range mutate {
			m(bd)
		}
	})
	return id
}

func (f *fixture) writeContent(name, manifests string) {
	f.t.Helper()
	data, err := bundlecontent.Encode([]byte(manifests))
	if err != nil {
		f.t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: bundlecontent.SecretName(name)}}
	err = f.up.Get(f.t.Context(), client.ObjectKeyFromObject(s), s)
	switch {
	case apierrors.IsNotFound(err):
		s.Type, s.Data = bundlecontent.SecretType, data
		err = f.up.Create(f.t.Context(), s)
	case err == nil:
		s.Data = data
		err = f.up.Update(f.t.Context(), s)
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// updateBD creates or updates a BundleDeployment's spec. A new one carries
// the labels the controller gives it for the fixture's cluster.
func (f *fixture) updateBD(name string, mutate func(*fleet.BundleDeployment)) {
	f.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		bd := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
		err := f.up.Get(f.t.Context(), client.ObjectKeyFromObject(bd), bd)
		switch {
		case apierrors.IsNotFound(err):
			bd.Labels = map[string]string{fleet.ClusterLabel: f.cluster, fleet.ClusterNamespaceLabel: f.ws}
			mutate(bd)
			return f.up.Create(f.t.Context(), bd)
		case err != nil:
			return err
		}
		mutate(bd)
		return f.up.Update(f.t.Context(), bd)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) getBD(name string) *fleet.BundleDeployment {
	f.t.Helper()
	bd := &fleet.BundleDeployment{}
	if err := f.up.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, bd); err != nil {
		f.t.Fatal(err)
	}
	return bd
}

// waitBD waits until cond holds for the BundleDeployment and returns it and
// how long it took.
func (f *fixture) waitBD(name string, timeout time.Duration, what string, cond func(*fleet.BundleDeployment) bool) (*fleet.BundleDeployment, time.Duration) {
	f.t.Helper()
	var got *fleet.BundleDeployment
	took := testenv.Eventually(f.t, timeout, "bundledeployment "+name+": "+what, func() error {
		bd := &fleet.BundleDeployment{}
		if err := f.up.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, bd); err != nil {
			return err
		}
		got = bd
		if !cond(bd) {
			return lastBD{bd}
		}
		return nil
	})
	return got, took
}

// lastBD is the state a waitBD saw last, printed only when the wait fails.
type lastBD struct{ bd *fleet.BundleDeployment }

func (l lastBD) Error() string {
	st, _ := json.MarshalIndent(l.bd, "", "  ")
	return fmt.Sprintf("last: %s", st)
}

func readyFor(id string) func(*fleet.BundleDeployment) bool {
	return func(bd *fleet.BundleDeployment) bool {
		return bd.Status.AppliedDeploymentID == id && bd.Status.Display.State == string(fleet.Ready) &&
			meta.IsStatusConditionTrue(bd.Status.Conditions, fleet.ReadyCondition)
	}
}

func stateIs(state fleet.BundleState) func(*fleet.BundleDeployment) bool {
	return func(bd *fleet.BundleDeployment) bool { return bd.Status.Display.State == string(state) }
}

func condition(bd *fleet.BundleDeployment, t string) metav1.Condition {
	if c := meta.FindStatusCondition(bd.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func (f *fixture) exists(obj client.Object) bool {
	f.t.Helper()
	err := f.down.Get(f.t.Context(), client.ObjectKeyFromObject(obj), obj)
	if err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatal(err)
	}
	return err == nil
}

func cm(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func configMapYAML(name, data string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  key: %q\n", name, data)
}

func docs(d ...string) string { return strings.Join(d, "---\n") }

func TestDeployer_AppliesAndReportsReady(t *testing.T) {
	f := newFixture(t)
	appNS := "apps-" + f.suffix
	role := "reader-" + f.suffix
	manifests := docs(
		configMapYAML("app-config", "one"),
		"apiVersion: v1\nkind: Secret\nmetadata:\n  name: app-secret\nstringData:\n  password: hunter2-"+f.suffix+"\n",
		"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: "+role+"\nrules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get]\n",
	)
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS, NamespaceLabels: map[string]string{"team": "a"}}
	id := f.deploy("app", manifests, opts)
	bd, took := f.waitBD("app", 30*time.Second, "Ready with the deployment applied", readyFor(id))
	t.Logf("applied and Ready in %s", took)

	// Status.
	want := []fleet.BundleDeploymentResource{
		{APIVersion: "v1", Kind: "ConfigMap", Namespace: appNS, Name: "app-config"},
		{APIVersion: "v1", Kind: "Secret", Namespace: appNS, Name: "app-secret"},
		{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: role},
	}
	var listed []fleet.BundleDeploymentResource
	for _, r := range bd.Status.Resources {
		if r.CreatedAt == nil {
			t.Errorf("status.resources: %s %s has no createdAt", r.Kind, r.Name)
		}
		r.CreatedAt = nil
		listed = append(listed, r)
	}
	if fmt.Sprint(listed) != fmt.Sprint(want) {
		t.Errorf("status.resources = %v, want %v", listed, want)
	}
	if rc := bd.Status.ResourceCounts; rc != (fleet.ResourceCounts{Ready: 3, DesiredReady: 3}) {
		t.Errorf("status.resourceCounts = %+v, want 3 ready of 3", rc)
	}
	if !bd.Status.Ready || !bd.Status.NonModified || bd.Status.SyncGeneration == nil {
		t.Errorf("status ready=%v nonModified=%v syncGeneration=%v, want true, true, set", bd.Status.Ready, bd.Status.NonModified, bd.Status.SyncGeneration)
	}
	for _, ct := range []string{fleet.ReadyCondition, fleet.DeployedCondition, fleet.MonitoredCondition} {
		c := condition(bd, ct)
		if c.Status != metav1.ConditionTrue || c.ObservedGeneration != bd.Generation {
			t.Errorf("condition %s = %+v, want True at generation %d", ct, c, bd.Generation)
		}
	}
	if d := bd.Status.Display; d.Deployed != "Yes" || d.Monitored != "Yes" {
		t.Errorf("display = %+v", d)
	}
	raw, _ := json.Marshal(bd.Status)
	secret := "hunter2-" + f.suffix
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), base64.StdEncoding.EncodeToString([]byte(secret))) {
		t.Errorf("status holds Secret data: %s", raw)
	}

	// Downstream: every object applied by the fleet field manager, with
	// the owner labels.
	objs := []client.Object{cm(appNS, "app-config"), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "app-secret"}}, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}}}
	for _, o := range objs {
		if err := f.down.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatalf("%T %s: %v", o, o.GetName(), err)
		}
		applied := false
		for _, mf := range o.GetManagedFields() {
			if mf.Manager == apply.FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply {
				applied = true
			}
		}
		if !applied {
			t.Errorf("%T %s is not applied by field manager %q: %+v", o, o.GetName(), apply.FieldManager, o.GetManagedFields())
		}
		if l := o.GetLabels(); l["fleet.cattle.io/name"] != "app" || l["fleet.cattle.io/namespace"] != f.ns {
			t.Errorf("%T %s owner labels = %v", o, o.GetName(), l)
		}
	}
	ns := &corev1.Namespace{}
	if err := f.down.Get(t.Context(), client.ObjectKey{Name: appNS}, ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels["team"] != "a" || ns.Annotations[PruneAnnotation] != PruneDisabled {
		t.Errorf("namespace %s labels %v annotations %v, want team=a and prune disabled", appNS, ns.Labels, ns.Annotations)
	}
	inv := cm(f.agentNS, InventoryName("app"))
	if !f.exists(inv) || !strings.Contains(inv.Data[InventoryKey], `"name":"`+role+`"`) {
		t.Errorf("inventory configmap: %+v", inv.Data)
	}
}

func TestDeployer_PrunesWhatLeftTheBundle(t *testing.T) {
	f := newFixture(t)
	appNS := "prune-" + f.suffix
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS}
	id := f.deploy("app", docs(configMapYAML("stays", "1"), configMapYAML("goes", "1")), opts)
	f.waitBD("app", 30*time.Second, "first deployment Ready", readyFor(id))
	if !f.exists(cm(appNS, "goes")) {
		t.Fatal("configmap goes was not applied")
	}

	id = f.deploy("app", configMapYAML("stays", "1"), opts)
	bd, _ := f.waitBD("app", 30*time.Second, "second deployment Ready", readyFor(id))
	took := testenv.Eventually(t, 10*time.Second, "configmap goes pruned", func() (bool, error) { return !f.exists(cm(appNS, "goes")), nil })
	t.Logf("pruned %s after Ready", took)
	if !f.exists(cm(appNS, "stays")) {
		t.Error("configmap stays was deleted")
	}
	if len(bd.Status.Resources) != 1 {
		t.Errorf("status.resources = %v, want only stays", bd.Status.Resources)
	}

	// keepResources: what leaves the bundle stays downstream.
	keep := fleet.BundleDeploymentOptions{DefaultNamespace: appNS, KeepResources: true}
	id = f.deploy("app", docs(configMapYAML("stays", "1"), configMapYAML("kept", "1")), keep)
	f.waitBD("app", 30*time.Second, "third deployment Ready", readyFor(id))
	id = f.deploy("app", configMapYAML("stays", "1"), keep)
	f.waitBD("app", 30*time.Second, "fourth deployment Ready", readyFor(id))
	time.Sleep(2 * f.opts.ResyncInterval)
	if !f.exists(cm(appNS, "kept")) {
		t.Error("configmap kept was pruned although keepResources is set")
	}

	// An object that lost its owner labels (taken over by someone) is not
	// pruned either.
	id = f.deploy("app", docs(configMapYAML("stays", "1"), configMapYAML("adopted", "1")), opts)
	f.waitBD("app", 30*time.Second, "fifth deployment Ready", readyFor(id))
	adopted := cm(appNS, "adopted")
	f.exists(adopted)
	delete(adopted.Labels, "fleet.cattle.io/name")
	if err := f.down.Update(t.Context(), adopted); err != nil {
		t.Fatal(err)
	}
	id = f.deploy("app", configMapYAML("stays", "1"), opts)
	f.waitBD("app", 30*time.Second, "sixth deployment Ready", readyFor(id))
	if !f.exists(cm(appNS, "adopted")) {
		t.Error("configmap adopted was pruned although it no longer carries the owner labels")
	}
}

func TestDeployer_DriftIsReportedAndCorrected(t *testing.T) {
	f := newFixture(t)
	appNS := "drift-" + f.suffix
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS}
	id := f.deploy("app", docs(configMapYAML("edited", "original"), configMapYAML("deleted", "x")), opts)
	f.waitBD("app", 30*time.Second, "Ready", readyFor(id))

	edited := cm(appNS, "edited")
	f.exists(edited)
	edited.Data["key"] = "changed by hand"
	if err := f.down.Update(t.Context(), edited); err != nil {
		t.Fatal(err)
	}
	if err := f.down.Delete(t.Context(), cm(appNS, "deleted")); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	bd, took := f.waitBD("app", 15*time.Second, "Modified with both objects named", func(bd *fleet.BundleDeployment) bool {
		return bd.Status.Display.State == string(fleet.Modified) && len(bd.Status.ModifiedStatus) == 2
	})
	t.Logf("drift reported %s after the change (resync interval %s)", took, f.opts.ResyncInterval)
	if took > 5*f.opts.ResyncInterval {
		t.Errorf("drift took %s to be reported, resync interval is %s", took, f.opts.ResyncInterval)
	}
	for _, m := range bd.Status.ModifiedStatus {
		switch m.Name {
		case "edited":
			if m.Create || m.Kind != "ConfigMap" || m.Namespace != appNS || !strings.Contains(m.Patch, "data.key") || strings.Contains(m.Patch, "changed by hand") {
				t.Errorf("modifiedStatus for edited = %+v, want the drifted path data.key without its value", m)
			}
		case "deleted":
			if !m.Create {
				t.Errorf("modifiedStatus for deleted = %+v, want missing=true", m)
			}
		default:
			t.Errorf("unexpected modifiedStatus %+v", m)
		}
	}
	if bd.Status.NonModified || meta.IsStatusConditionTrue(bd.Status.Conditions, fleet.ReadyCondition) {
		t.Errorf("nonModified=%v Ready=%v, want false, false", bd.Status.NonModified, condition(bd, fleet.ReadyCondition))
	}
	if f.exists(cm(appNS, "deleted")) {
		t.Fatal("the deleted configmap came back without correctDrift")
	}

	// correctDrift: reverted and recreated.
	f.updateBD("app", func(bd *fleet.BundleDeployment) { bd.Spec.CorrectDrift = &fleet.CorrectDrift{Enabled: true} })
	bd, took = f.waitBD("app", 15*time.Second, "Ready after drift correction", readyFor(id))
	t.Logf("drift corrected %s after enabling correctDrift (%s after the change)", took, time.Since(changed))
	if !bd.Status.NonModified || len(bd.Status.ModifiedStatus) != 0 {
		t.Errorf("after correction nonModified=%v modifiedStatus=%v", bd.Status.NonModified, bd.Status.ModifiedStatus)
	}
	edited = cm(appNS, "edited")
	f.exists(edited)
	if edited.Data["key"] != "original" {
		t.Errorf("edited configmap holds %q, want original", edited.Data["key"])
	}
	if !f.exists(cm(appNS, "deleted")) {
		t.Error("deleted configmap was not recreated")
	}

	// With correctDrift on, a later edit is reverted on the next resync.
	edited.Data["key"] = "changed again"
	if err := f.down.Update(t.Context(), edited); err != nil {
		t.Fatal(err)
	}
	took = testenv.Eventually(t, 15*time.Second, "edit reverted", func() (bool, error) {
		c := cm(appNS, "edited")
		f.exists(c)
		return c.Data["key"] == "original", nil
	})
	t.Logf("second edit reverted in %s", took)
	f.waitBD("app", 15*time.Second, "Ready", readyFor(id))
}

func TestDeployer_DeletedBundleDeploymentIsPruned(t *testing.T) {
	f := newFixture(t)
	appNS := "deleted-" + f.suffix
	role := "deleted-" + f.suffix
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS}
	roleYAML := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: " + role + "\nrules: []\n"
	id := f.deploy("one", docs(configMapYAML("one", "1"), roleYAML), opts)
	f.waitBD("one", 30*time.Second, "Ready", readyFor(id))
	id2 := f.deploy("two", configMapYAML("two", "1"), opts)
	f.waitBD("two", 30*time.Second, "Ready", readyFor(id2))

	if err := f.up.Delete(t.Context(), f.getBD("one")); err != nil {
		t.Fatal(err)
	}
	took := testenv.Eventually(t, 15*time.Second, "objects of the deleted BundleDeployment pruned", func() (bool, error) {
		return !f.exists(cm(appNS, "one")) && !f.exists(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}}) &&
			!f.exists(cm(f.agentNS, InventoryName("one"))), nil
	})
	t.Logf("pruned %s after the deletion", took)
	if !f.exists(cm(appNS, "two")) {
		t.Error("configmap of the other BundleDeployment was pruned")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}
	if !f.exists(ns) || ns.DeletionTimestamp != nil {
		t.Error("the namespace made for defaultNamespace was deleted")
	}

	// Deleted while the agent is down: the next agent prunes.
	f.stop()
	if err := f.up.Delete(t.Context(), f.getBD("two")); err != nil {
		t.Fatal(err)
	}
	f.start()
	took = testenv.Eventually(t, 30*time.Second, "objects pruned by the restarted deployer", func() (bool, error) {
		return !f.exists(cm(appNS, "two")) && !f.exists(cm(f.agentNS, InventoryName("two"))), nil
	})
	t.Logf("pruned %s after the restart", took)

	// keepResources survives the deletion too.
	keep := fleet.BundleDeploymentOptions{DefaultNamespace: appNS, KeepResources: true}
	id3 := f.deploy("three", configMapYAML("three", "1"), keep)
	f.waitBD("three", 30*time.Second, "Ready", readyFor(id3))
	if err := f.up.Delete(t.Context(), f.getBD("three")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "inventory of three removed", func() (bool, error) {
		return !f.exists(cm(f.agentNS, InventoryName("three"))), nil
	})
	if !f.exists(cm(appNS, "three")) {
		t.Error("configmap three was pruned although keepResources is set")
	}
}

func TestDeployer_StagedApplyCRDAndCustomResource(t *testing.T) {
	f := newFixture(t)
	appNS := "crd-" + f.suffix
	group := "t" + f.suffix + ".example.com"
	manifests := docs(
		fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
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
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
`, group),
		fmt.Sprintf("apiVersion: %s/v1\nkind: Gadget\nmetadata:\n  name: first\nspec:\n  size: 3\n", group),
	)
	id := f.deploy("gadgets", manifests, fleet.BundleDeploymentOptions{DefaultNamespace: appNS, DeleteCRDResources: true})
	bd, took := f.waitBD("gadgets", 60*time.Second, "Ready", readyFor(id))
	t.Logf("CRD and custom resource applied and Ready in %s", took)
	g := &unstructured.Unstructured{}
	g.SetAPIVersion(group + "/v1")
	g.SetKind("Gadget")
	if err := f.down.Get(t.Context(), client.ObjectKey{Namespace: appNS, Name: "first"}, g); err != nil {
		t.Fatalf("the custom resource was not applied into the default namespace: %v", err)
	}
	if size, _, _ := unstructured.NestedInt64(g.Object, "spec", "size"); size != 3 {
		t.Errorf("gadget spec.size = %d", size)
	}
	if len(bd.Status.Resources) != 2 || bd.Status.Resources[1].Namespace != appNS {
		t.Errorf("status.resources = %v", bd.Status.Resources)
	}
	// Deleting the BundleDeployment (deleteCRDResources) removes the CRD last; the custom
	// resource goes with it.
	if err := f.up.Delete(t.Context(), bd); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "CRD pruned", func() (bool, error) {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		crd.SetName("gadgets." + group)
		return !f.exists(crd), nil
	})
}

func TestDeployer_BadManifestIsReported(t *testing.T) {
	f := newFixture(t)
	appNS := "bad-" + f.suffix
	manifests := docs(configMapYAML("fine", "1"), "apiVersion: nowhere.example.com/v1\nkind: Widget\nmetadata:\n  name: mystery\n")
	f.deploy("bad", manifests, fleet.BundleDeploymentOptions{DefaultNamespace: appNS})
	bd, took := f.waitBD("bad", 30*time.Second, "ErrApplied", stateIs(fleet.ErrApplied))
	t.Logf("reported in %s", took)
	c := condition(bd, fleet.DeployedCondition)
	if c.Status != metav1.ConditionFalse || c.Reason != fleet.ApplyFailedReason || !strings.Contains(c.Message, "Widget") || !strings.Contains(c.Message, "mystery") {
		t.Errorf("Deployed = %+v, want False/ApplyFailed naming Widget mystery", c)
	}
	if f.exists(cm(appNS, "fine")) {
		t.Error("part of a bundle with an unknown kind was applied")
	}

	// Backoff, not a retry storm: 1s, 2s, 4s, ... between attempts.
	before := f.d.reconciles.Load()
	time.Sleep(8 * time.Second)
	n := f.d.reconciles.Load() - before
	t.Logf("%d reconciles in 8s while failing", n)
	if n > 5 {
		t.Errorf("%d reconciles in 8s for a bundle that cannot be applied: want backoff", n)
	}
	statusRV := f.getBD("bad").ResourceVersion
	if statusRV != bd.ResourceVersion {
		t.Errorf("status rewritten while nothing changed (resourceVersion %s → %s)", bd.ResourceVersion, statusRV)
	}

	// Undecodable manifests: reported, not retried until the content changes.
	broken := "apiVersion: v1\nkind: ConfigMap\nmetadata: [not, a, map\n"
	f.deploy("broken", broken, fleet.BundleDeploymentOptions{DefaultNamespace: appNS})
	bd, _ = f.waitBD("broken", 30*time.Second, "ErrApplied", stateIs(fleet.ErrApplied))
	if c := condition(bd, fleet.DeployedCondition); !strings.Contains(c.Message, "document 1") {
		t.Errorf("Deployed = %+v, want a message naming the document", c)
	}

	// Fixed content is applied.
	id := f.deploy("bad", configMapYAML("fine", "1"), fleet.BundleDeploymentOptions{DefaultNamespace: appNS})
	f.waitBD("bad", 30*time.Second, "Ready after the fix", readyFor(id))
}

func TestDeployer_StaleOrMissingContentWaits(t *testing.T) {
	f := newFixture(t)
	appNS := "stale-" + f.suffix
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS}
	manifests := configMapYAML("wanted", "1")
	id := bundlecontent.DeploymentID(bundlecontent.ManifestID([]byte(manifests)), opts)

	// No Secret at all.
	f.updateBD("app", func(bd *fleet.BundleDeployment) { bd.Spec.Options, bd.Spec.DeploymentID = opts, id })
	bd, _ := f.waitBD("app", 30*time.Second, "WaitApplied", stateIs(fleet.WaitApplied))
	if c := condition(bd, fleet.DeployedCondition); c.Reason != WaitingForContentReason {
		t.Errorf("Deployed = %+v, want reason %s", c, WaitingForContentReason)
	}

	// A Secret with other manifests.
	f.writeContent("app", configMapYAML("other", "1"))
	bd, _ = f.waitBD("app", 30*time.Second, "still waiting, now for the right content", func(bd *fleet.BundleDeployment) bool {
		return strings.Contains(condition(bd, fleet.DeployedCondition).Message, "holds")
	})
	if c := condition(bd, fleet.DeployedCondition); c.Reason != WaitingForContentReason || bd.Status.AppliedDeploymentID != "" {
		t.Errorf("Deployed = %+v appliedDeploymentID=%q", c, bd.Status.AppliedDeploymentID)
	}
	if f.exists(cm(appNS, "other")) {
		t.Error("stale content was applied")
	}

	// The right Secret: applied, woken by the Secret watch.
	start := time.Now()
	f.writeContent("app", manifests)
	f.waitBD("app", 30*time.Second, "Ready", readyFor(id))
	t.Logf("applied %s after the content arrived", time.Since(start))
	if !f.exists(cm(appNS, "wanted")) {
		t.Error("configmap wanted missing")
	}
}

func TestDeployer_NoWriteWhenNothingChanged(t *testing.T) {
	f := newFixture(t)
	appNS := "quiet-" + f.suffix
	role := "quiet-" + f.suffix
	manifests := docs(
		configMapYAML("a", "1"),
		"apiVersion: v1\nkind: Service\nmetadata:\n  name: svc\nspec:\n  ports:\n  - port: 80\n",
		"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: "+role+"\nrules: []\n",
	)
	id := f.deploy("app", manifests, fleet.BundleDeploymentOptions{DefaultNamespace: appNS, NamespaceLabels: map[string]string{"x": "y"}})
	bd, _ := f.waitBD("app", 30*time.Second, "Ready", readyFor(id))
	time.Sleep(time.Second) // let the pass after the apply settle

	objs := []client.Object{
		cm(appNS, "a"),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "svc"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}},
		cm(f.agentNS, InventoryName("app")),
	}
	rvs := func() []string {
		var out []string
		for _, o := range objs {
			if !f.exists(o) {
				t.Fatalf("%T %s missing", o, o.GetName())
			}
			out = append(out, o.GetName()+"@"+o.GetResourceVersion())
		}
		return append(out, "bd@"+f.getBD("app").ResourceVersion)
	}
	before := rvs()
	r0 := f.d.reconciles.Load()
	time.Sleep(5 * f.opts.ResyncInterval)
	after := rvs()
	n := f.d.reconciles.Load() - r0
	t.Logf("%d resyncs in %s", n, 5*f.opts.ResyncInterval)
	if n < 3 {
		t.Errorf("only %d reconciles in %s: resync is not running", n, 5*f.opts.ResyncInterval)
	}
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("objects or status were written although nothing changed:\nbefore %v\nafter  %v", before, after)
	}
	_ = bd
}

func TestDeployer_NotReadyDeploymentIsReported(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.HealthTimeout = 3 * time.Second })
	appNS := "notready-" + f.suffix
	manifests := docs(
		configMapYAML("fine", "1"),
		`apiVersion: apps/v1
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
        image: registry.invalid/web:1
`)
	id := f.deploy("app", manifests, fleet.BundleDeploymentOptions{DefaultNamespace: appNS})
	bd, took := f.waitBD("app", 30*time.Second, "NotReady", func(bd *fleet.BundleDeployment) bool {
		return bd.Status.AppliedDeploymentID == id && bd.Status.Display.State == string(fleet.NotReady)
	})
	t.Logf("NotReady reported in %s: %+v", took, bd.Status.NonReadyStatus)
	if bd.Status.Ready || len(bd.Status.NonReadyStatus) != 1 || bd.Status.NonReadyStatus[0].Kind != "Deployment" || bd.Status.NonReadyStatus[0].Name != "web" || bd.Status.NonReadyStatus[0].Summary.State == "" {
		t.Errorf("ready=%v nonReadyStatus=%+v, want the Deployment web with a summary", bd.Status.Ready, bd.Status.NonReadyStatus)
	}
	if c := condition(bd, fleet.ReadyCondition); c.Status != metav1.ConditionFalse || c.Reason != fleet.NotReadyReason || !strings.Contains(c.Message, "web") {
		t.Errorf("Ready = %+v", c)
	}
	if c := condition(bd, fleet.DeployedCondition); c.Status != metav1.ConditionTrue {
		t.Errorf("Deployed = %+v, want True: the apply worked", c)
	}

	// After the health timeout: reported as such, and no apply loop.
	dep := &unstructured.Unstructured{}
	dep.SetAPIVersion("apps/v1")
	dep.SetKind("Deployment")
	dep.SetNamespace(appNS)
	dep.SetName("web")
	f.exists(dep)
	rv := dep.GetResourceVersion()
	bd, took = f.waitBD("app", 15*time.Second, "HealthTimeout", func(bd *fleet.BundleDeployment) bool {
		return condition(bd, fleet.ReadyCondition).Reason == HealthTimeoutReason
	})
	t.Logf("HealthTimeout reported %s later", took)
	if !strings.Contains(condition(bd, fleet.ReadyCondition).Message, "Deployment "+appNS+"/web") {
		t.Errorf("Ready = %+v, want the Deployment named", condition(bd, fleet.ReadyCondition))
	}
	time.Sleep(3 * f.opts.ResyncInterval)
	f.exists(dep)
	if dep.GetResourceVersion() != rv {
		t.Errorf("the Deployment was written again (resourceVersion %s → %s): apply loop", rv, dep.GetResourceVersion())
	}
	if got := f.getBD("app"); got.Status.AppliedDeploymentID != id || got.Status.Display.State != string(fleet.NotReady) {
		t.Errorf("state %s applied %s", got.Status.Display.State, got.Status.AppliedDeploymentID)
	}
}

// The health timeout counts from when the deployment in force was applied,
// as the status records it: a restarted agent neither counts from an
// earlier apply (the Deployed condition's last transition does not move
// when a forced sync or an options change applies again without Deployed
// going False) nor starts the count again.
func TestDeployer_HealthTimeoutSurvivesARestart(t *testing.T) {
	const timeout = 8 * time.Second
	f := newFixture(t, func(o *Options) { o.HealthTimeout = timeout })
	appNS := "restart-" + f.suffix
	id := f.deploy("app", docs(configMapYAML("a", "1"), neverReady), fleet.BundleDeploymentOptions{DefaultNamespace: appNS})
	notReadyAt := func(sync int64) func(*fleet.BundleDeployment) bool {
		return func(bd *fleet.BundleDeployment) bool {
			return bd.Status.AppliedDeploymentID == id && bd.Status.SyncGeneration != nil && *bd.Status.SyncGeneration == sync &&
				condition(bd, fleet.ReadyCondition).Reason == fleet.NotReadyReason
		}
	}
	f.waitBD("app", 30*time.Second, "NotReady", notReadyAt(0))

	// It was applied an hour ago (its status says so).
	hourAgo := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		bd := f.getBD("app")
		for i := range bd.Status.Conditions {
			bd.Status.Conditions[i].LastTransitionTime = hourAgo
		}
		bd.Status.AppliedAt = &hourAgo
		return f.up.Status().Update(t.Context(), bd)
	})
	if err != nil {
		t.Fatal(err)
	}

	// A forced sync applies it again now.
	f.updateBD("app", func(bd *fleet.BundleDeployment) { bd.Spec.Options.ForceSyncGeneration = 1 })
	bd, _ := f.waitBD("app", 30*time.Second, "NotReady after the forced sync", notReadyAt(1))
	appliedAt := bd.Status.AppliedAt
	if appliedAt == nil || time.Since(appliedAt.Time) > timeout/2 {
		t.Fatalf("appliedAt = %v, want the forced sync, moments ago", appliedAt)
	}
	if c := condition(bd, fleet.DeployedCondition); c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Equal(&hourAgo) {
		t.Errorf("Deployed = %+v, want True since an hour ago (its status did not change)", c)
	}
	if got := bd.ManagedFields; !slices.ContainsFunc(got, func(m metav1.ManagedFieldsEntry) bool {
		return m.Manager == fieldManager && m.Subresource == "status"
	}) {
		t.Errorf("managed fields %+v: status not written by %s", got, fieldManager)
	}

	// The agent restarts: its first passes still count from the forced
	// sync.
	f.stop()
	f.start()
	testenv.Eventually(t, 10*time.Second, "two passes of the restarted deployer", func() error {
		if n := f.d.reconciles.Load(); n < 2 {
			return fmt.Errorf("%d passes", n)
		}
		return nil
	})
	bd = f.getBD("app")
	if left := timeout - time.Since(appliedAt.Time); left < time.Second {
		t.Fatalf("the restart took too long to tell (%s of the health timeout left)", left)
	}
	if c := condition(bd, fleet.ReadyCondition); c.Reason != fleet.NotReadyReason || !bd.Status.AppliedAt.Equal(appliedAt) {
		t.Errorf("after the restart, before the health timeout: Ready = %s (%s), appliedAt %v; want %s since %s", c.Reason, c.Message, bd.Status.AppliedAt, fleet.NotReadyReason, appliedAt)
	}

	// And it times out when the timeout since the forced sync is up.
	bd, _ = f.waitBD("app", timeout+10*time.Second, "HealthTimeout", func(bd *fleet.BundleDeployment) bool {
		return condition(bd, fleet.ReadyCondition).Reason == HealthTimeoutReason
	})
	if at := time.Now(); at.Before(appliedAt.Add(timeout)) {
		t.Errorf("HealthTimeout at %s, before %s", at, appliedAt.Add(timeout))
	}
}

// neverReady is a Deployment whose image does not exist.
const neverReady = `apiVersion: apps/v1
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
        image: registry.invalid/web:1
`

// asAgentBundle labels a BundleDeployment as the controller labels the one
// of a Cluster's agent Bundle.
func asAgentBundle(bd *fleet.BundleDeployment) { bd.Labels[fleet.AgentBundleLabel] = "true" }

// The agent's own Bundle is dry-run as a whole before anything of it is
// applied. The deployer knows it by the controller's label, whatever its
// name (the name here is not fleet-agent-<cluster>).
func TestDeployer_AgentBundleNeverHalfApplies(t *testing.T) {
	f := newFixture(t)
	appNS := "agent-bundle-" + f.suffix
	role := "agent-bundle-" + f.suffix
	name := "marked-by-label"
	roleYAML := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: " + role + "\nrules: []\n"
	// The Service is invalid (port out of range): only a dry run finds it.
	badService := "apiVersion: v1\nkind: Service\nmetadata:\n  name: broken\nspec:\n  ports:\n  - port: 99999\n"
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS}
	f.deploy(name, docs(roleYAML, configMapYAML("cfg", "1"), badService), opts, asAgentBundle)
	bd, took := f.waitBD(name, 30*time.Second, "ErrApplied", stateIs(fleet.ErrApplied))
	t.Logf("dry-run failure reported in %s", took)
	if c := condition(bd, fleet.DeployedCondition); c.Reason != fleet.ApplyFailedReason || !strings.Contains(c.Message, "dry run") || !strings.Contains(c.Message, "broken") {
		t.Errorf("Deployed = %+v, want ApplyFailed naming the dry run and the Service", c)
	}
	if f.exists(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}}) || f.exists(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}) {
		t.Error("the agent bundle was half-applied: its first stage exists")
	}

	// A fixed agent bundle applies, including into the namespace it makes.
	id := f.deploy(name, docs(roleYAML, configMapYAML("cfg", "1")), opts, asAgentBundle)
	f.waitBD(name, 30*time.Second, "Ready", readyFor(id))
	if !f.exists(cm(appNS, "cfg")) {
		t.Error("configmap cfg missing")
	}
}

func TestDeployer_PausedAppliesNothingAndForceSyncReapplies(t *testing.T) {
	f := newFixture(t)
	appNS := "paused-" + f.suffix
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS}
	paused := func(p bool) func(*fleet.BundleDeployment) {
		return func(bd *fleet.BundleDeployment) { bd.Spec.Paused = p }
	}
	id := f.deploy("app", configMapYAML("a", "1"), opts, paused(true))
	bd, _ := f.waitBD("app", 30*time.Second, "Paused", func(bd *fleet.BundleDeployment) bool {
		return condition(bd, fleet.DeployedCondition).Reason == fleet.PausedReason
	})
	if bd.Status.Display.State != string(fleet.WaitApplied) || bd.Status.AppliedDeploymentID != "" {
		t.Errorf("paused: state %s applied %q", bd.Status.Display.State, bd.Status.AppliedDeploymentID)
	}
	time.Sleep(2 * f.opts.ResyncInterval)
	if f.exists(cm(appNS, "a")) {
		t.Fatal("a paused BundleDeployment was applied")
	}
	f.updateBD("app", paused(false))
	f.waitBD("app", 30*time.Second, "Ready after unpausing", readyFor(id))

	// Paused with new content: the old deployment stays, still monitored.
	id2 := f.deploy("app", configMapYAML("a", "2"), opts, paused(true))
	bd, _ = f.waitBD("app", 30*time.Second, "Paused behind", func(bd *fleet.BundleDeployment) bool {
		return bd.Spec.DeploymentID == id2 && condition(bd, fleet.DeployedCondition).Reason == fleet.PausedReason
	})
	if bd.Status.AppliedDeploymentID != id || len(bd.Status.Resources) != 1 {
		t.Errorf("paused behind: applied %q resources %v", bd.Status.AppliedDeploymentID, bd.Status.Resources)
	}
	c := cm(appNS, "a")
	f.exists(c)
	if c.Data["key"] != "1" {
		t.Errorf("paused content was applied: %v", c.Data)
	}
	f.updateBD("app", paused(false))
	f.waitBD("app", 30*time.Second, "Ready after unpausing", readyFor(id2))

	// forceSyncGeneration: applied again (nothing to write when nothing
	// drifted), and recorded.
	f.updateBD("app", func(bd *fleet.BundleDeployment) { bd.Spec.Options.ForceSyncGeneration = 3 })
	f.waitBD("app", 30*time.Second, "syncGeneration 3", func(bd *fleet.BundleDeployment) bool {
		return bd.Status.SyncGeneration != nil && *bd.Status.SyncGeneration == 3 && readyFor(id2)(bd)
	})
}

// The controller applies the agent's objects at first deploy under the same
// field manager and owner labels as the deployer later applies Bundle
// fleet-agent-<cluster>: the deployer's adoption writes nothing.
func TestDeployer_AdoptsAgentObjectsWithoutWrites(t *testing.T) {
	f := newFixture(t)
	sysNS := "sys-" + f.suffix
	name := names.AgentBundle(f.cluster)
	manifests := docs(
		"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: fleet-agent\n  namespace: "+sysNS+"\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fleet-agent\n  namespace: "+sysNS+"\ndata:\n  config: '{}'\n",
		`apiVersion: apps/v1
kind: Deployment
metadata:
  name: fleet-agent
  namespace: `+sysNS+`
spec:
  selector:
    matchLabels: {app: fleet-agent}
  template:
    metadata:
      labels: {app: fleet-agent}
    spec:
      serviceAccountName: fleet-agent
      containers:
      - name: agent
        image: registry.invalid/fleet-agent:1
        env:
        - {name: GENERATION, value: "1"}
`)
	// What the controller does (controller/cluster/import.go deploy).
	objs, err := apply.ReadObjects([]byte(manifests))
	if err != nil {
		t.Fatal(err)
	}
	rm := apply.NewManager(f.down)
	rm.SetOwnerLabels(objs, name, f.ns)
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(sysNS)
	ns.SetLabels(map[string]string{fleet.ManagedLabel: "true"})
	if _, err := rm.ApplyAllStaged(t.Context(), append([]*unstructured.Unstructured{ns}, objs...), ssa.DefaultApplyOptions()); err != nil {
		t.Fatal(err)
	}
	watched := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sysNS}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sysNS, Name: "fleet-agent"}},
		cm(sysNS, "fleet-agent"),
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"namespace": sysNS, "name": "fleet-agent"}}},
	}
	rvs := func() string {
		var out []string
		for _, o := range watched {
			if !f.exists(o) {
				t.Fatalf("%s missing", o.GetName())
			}
			out = append(out, fmt.Sprintf("%T@%s", o, o.GetResourceVersion()))
		}
		return strings.Join(out, " ")
	}
	before := rvs()

	// The agent Bundle as the controller makes it: defaultNamespace is the
	// agent's namespace.
	id := f.deploy(name, manifests, fleet.BundleDeploymentOptions{DefaultNamespace: sysNS}, asAgentBundle)
	f.waitBD(name, 30*time.Second, "applied (the Deployment is never ready here)", func(bd *fleet.BundleDeployment) bool {
		return bd.Status.AppliedDeploymentID == id && bd.Status.Display.State == string(fleet.NotReady) && bd.Status.NonModified
	})
	time.Sleep(2 * f.opts.ResyncInterval)
	if after := rvs(); after != before {
		t.Errorf("adoption wrote to the agent's objects:\nbefore %s\nafter  %s", before, after)
	}
	if l := watched[0].GetLabels(); l[fleet.ManagedLabel] != "true" {
		t.Errorf("agent namespace labels = %v, want the controller's %s kept", l, fleet.ManagedLabel)
	}
}
