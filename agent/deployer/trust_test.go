package deployer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// Tests of the deployer's trust boundaries (shared/SPEC.md §6): a Bundle
// applies downstream only what its serviceAccount may, and an agent applies
// only what was made for its own cluster.

// serviceAccount makes a ServiceAccount in the agent's namespace downstream,
// as a downstream admin does for options.serviceAccount.
func (f *fixture) serviceAccount(name string) {
	f.t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.agentNS, Name: name}}
	if err := f.down.Create(f.t.Context(), sa); err != nil {
		f.t.Fatal(err)
	}
}

// allowConfigMaps lets ServiceAccount sa of the agent's namespace use verbs
// on ConfigMaps in namespace ns, and nothing else (a Role there).
func (f *fixture) allowConfigMaps(sa, ns string, verbs ...string) {
	f.t.Helper()
	ctx := f.t.Context()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configmaps-" + sa}}
	if _, err := controllerutil.CreateOrUpdate(ctx, f.down, role, func() error {
		role.Rules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs}}
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configmaps-" + sa}}
	if _, err := controllerutil.CreateOrUpdate(ctx, f.down, rb, func() error {
		rb.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}
		rb.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: f.agentNS, Name: sa}}
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) downstreamNamespace(name string) {
	f.t.Helper()
	if err := f.down.Create(f.t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		f.t.Fatal(err)
	}
}

func deploymentYAML(name string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: 1
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      containers:
      - name: web
        image: registry.invalid/web:1
`, name)
}

func deployment(ns, name string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func (f *fixture) configMapData(ns, name string) string {
	f.t.Helper()
	c := cm(ns, name)
	if !f.exists(c) {
		return "(missing)"
	}
	return c.Data["key"]
}

func conditionIs(t, reason string) func(*fleet.BundleDeployment) bool {
	return func(bd *fleet.BundleDeployment) bool {
		c := condition(bd, t)
		return c.Status == metav1.ConditionFalse && c.Reason == reason && c.ObservedGeneration == bd.Generation
	}
}

func wantMessage(t *testing.T, c metav1.Condition, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(c.Message, p) {
			t.Errorf("%s condition message lacks %q:\n%s", c.Type, p, c.Message)
		}
	}
}

func TestDeployer_ServiceAccountBoundsWhatABundleMayDo(t *testing.T) {
	f := newFixture(t)
	appNS := "sa-app-" + f.suffix
	f.downstreamNamespace(appNS)
	f.serviceAccount("deployer")
	// No delete yet: pruning must be refused while it lacks it.
	f.allowConfigMaps("deployer", appNS, "get", "list", "watch", "create", "update", "patch")
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS, ServiceAccount: "deployer"}
	who := "serviceaccount " + f.agentNS + "/deployer"

	// ConfigMaps where the ServiceAccount may write them: applied.
	id := f.deploy("app", docs(configMapYAML("one", "1"), configMapYAML("two", "1")), opts)
	_, took := f.waitBD("app", 30*time.Second, "Ready", readyFor(id))
	t.Logf("applied as %s in %s", who, took)
	for _, n := range []string{"one", "two"} {
		c := cm(appNS, n)
		if !f.exists(c) || c.Labels["fleet.cattle.io/name"] != "app" || c.Labels["fleet.cattle.io/namespace"] != f.ns {
			t.Fatalf("configmap %s missing or without owner labels: %+v", n, c.ObjectMeta)
		}
	}
	inv := cm(f.agentNS, InventoryName("app"))
	if !f.exists(inv) || !strings.Contains(inv.Data[InventoryKey], `"serviceAccount":"deployer"`) {
		t.Errorf("inventory does not record the serviceAccount: %v", inv.Data)
	}

	// A Deployment beside them: the ServiceAccount may not make one. The
	// whole deployment is refused, reported, and nothing of it applied.
	f.deploy("app", docs(configMapYAML("one", "2"), configMapYAML("two", "1"), deploymentYAML("web")), opts)
	bd, took := f.waitBD("app", 30*time.Second, "Forbidden", conditionIs(fleet.DeployedCondition, fleet.ForbiddenReason))
	t.Logf("refusal reported in %s", took)
	wantMessage(t, condition(bd, fleet.DeployedCondition),
		who+" may not patch deployments.apps in namespace "+appNS+" (Deployment "+appNS+"/web)",
		"nothing of this deployment was applied")
	if r := condition(bd, fleet.ReadyCondition); r.Status != metav1.ConditionFalse || r.Reason != fleet.ForbiddenReason {
		t.Errorf("Ready = %+v, want False/%s", r, fleet.ForbiddenReason)
	}
	if bd.Status.Display.State != string(fleet.ErrApplied) || bd.Status.AppliedDeploymentID != id {
		t.Errorf("state %s applied %q, want ErrApplied with the previous deployment still applied", bd.Status.Display.State, bd.Status.AppliedDeploymentID)
	}
	if got := f.configMapData(appNS, "one"); got != "1" {
		t.Errorf("configmap one holds %q: part of a refused deployment was applied", got)
	}
	if f.exists(deployment(appNS, "web")) {
		t.Error("the refused Deployment exists")
	}

	// Tried again once per resync, not in a storm, and the status is not
	// rewritten while nothing changes.
	window := 5 * f.opts.ResyncInterval
	r0 := f.d.reconciles.Load()
	time.Sleep(window)
	n := f.d.reconciles.Load() - r0
	t.Logf("%d reconciles in %s while refused (resync %s)", n, window, f.opts.ResyncInterval)
	if n > 8 {
		t.Errorf("%d reconciles in %s for a refused bundle: want about one per resync", n, window)
	}
	if rv := f.getBD("app").ResourceVersion; rv != bd.ResourceVersion {
		t.Errorf("status rewritten while nothing changed (resourceVersion %s → %s)", bd.ResourceVersion, rv)
	}

	// Control: the same Deployment without serviceAccount is applied with
	// the agent's own identity, as before serviceAccount existed.
	plainID := f.deploy("plain", deploymentYAML("plain-web"), fleet.BundleDeploymentOptions{DefaultNamespace: appNS})
	f.waitBD("plain", 30*time.Second, "applied", func(bd *fleet.BundleDeployment) bool { return bd.Status.AppliedDeploymentID == plainID })
	if !f.exists(deployment(appNS, "plain-web")) {
		t.Error("the Deployment of the bundle without serviceAccount was not applied")
	}
	if inv := cm(f.agentNS, InventoryName("plain")); !f.exists(inv) || strings.Contains(inv.Data[InventoryKey], "serviceAccount") {
		t.Errorf("inventory of the bundle without serviceAccount: %v", inv.Data)
	}

	// The Deployment and configmap one leave the bundle: two is applied,
	// but pruning one is refused (no delete yet) and said so.
	id = f.deploy("app", configMapYAML("two", "3"), opts)
	bd, _ = f.waitBD("app", 30*time.Second, "prune refused", func(bd *fleet.BundleDeployment) bool {
		return conditionIs(fleet.DeployedCondition, fleet.ForbiddenReason)(bd) && strings.Contains(condition(bd, fleet.DeployedCondition).Message, "not pruned")
	})
	wantMessage(t, condition(bd, fleet.DeployedCondition), who+" may not delete configmaps in namespace "+appNS+" (ConfigMap "+appNS+"/one)")
	if got := f.configMapData(appNS, "two"); got != "3" {
		t.Errorf("configmap two holds %q, want the applied 3", got)
	}
	if !f.exists(cm(appNS, "one")) {
		t.Fatal("configmap one was deleted although the ServiceAccount may not delete it")
	}

	// Allowed to delete: pruned at a following resync, as the ServiceAccount.
	f.allowConfigMaps("deployer", appNS, "get", "list", "watch", "create", "update", "patch", "delete")
	f.waitBD("app", 30*time.Second, "Ready once allowed to prune", readyFor(id))
	testenv.Eventually(t, 10*time.Second, "configmap one pruned", func() error {
		if f.exists(cm(appNS, "one")) {
			return fmt.Errorf("still there")
		}
		return nil
	})

	// The BundleDeployment is deleted while the ServiceAccount may not
	// delete: its objects stay (they are pruned as the ServiceAccount the
	// inventory names, not as the agent) until it may.
	f.allowConfigMaps("deployer", appNS, "get", "list", "watch", "create", "update", "patch")
	// RBAC changes reach the authorizer through its informer: wait until
	// the ServiceAccount is refused a delete before deleting.
	f.waitRefused("deployer", appNS)
	if err := f.up.Delete(t.Context(), f.getBD("app")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * f.opts.ResyncInterval)
	if !f.exists(cm(appNS, "two")) || !f.exists(cm(f.agentNS, InventoryName("app"))) {
		t.Fatal("objects of the deleted BundleDeployment were pruned by someone the ServiceAccount's RBAC does not allow")
	}
	f.allowConfigMaps("deployer", appNS, "get", "delete")
	testenv.Eventually(t, 60*time.Second, "objects of the deleted BundleDeployment pruned", func() error {
		if f.exists(cm(appNS, "two")) || f.exists(cm(f.agentNS, InventoryName("app"))) {
			return fmt.Errorf("configmap two or the inventory still there")
		}
		return nil
	})
}

// waitRefused waits until the API server refuses ServiceAccount sa a
// delete of ConfigMaps in ns (a server-side dry run as sa).
func (f *fixture) waitRefused(sa, ns string) {
	f.t.Helper()
	id, err := f.d.identityFor(f.t.Context(), sa)
	if err != nil {
		f.t.Fatal(err)
	}
	testenv.Eventually(f.t, 10*time.Second, "delete refused to "+sa, func() error {
		err := id.c.Delete(f.t.Context(), cm(ns, "no-such-configmap"))
		if apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("delete not refused yet: %v", err)
	})
}

func TestDeployer_MissingServiceAccountIsReported(t *testing.T) {
	f := newFixture(t)
	appNS := "sa-missing-" + f.suffix
	f.downstreamNamespace(appNS)
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS, ServiceAccount: "late"}
	id := f.deploy("app", configMapYAML("cfg", "1"), opts)
	bd, took := f.waitBD("app", 30*time.Second, "ServiceAccountMissing", conditionIs(fleet.DeployedCondition, fleet.ServiceAccountMissingReason))
	t.Logf("reported in %s", took)
	wantMessage(t, condition(bd, fleet.DeployedCondition), "serviceaccount "+f.agentNS+"/late", "does not exist", "nothing was applied")
	if bd.Status.Display.State != string(fleet.ErrApplied) || condition(bd, fleet.ReadyCondition).Reason != fleet.ServiceAccountMissingReason {
		t.Errorf("state %s Ready %+v", bd.Status.Display.State, condition(bd, fleet.ReadyCondition))
	}
	if f.exists(cm(appNS, "cfg")) {
		t.Fatal("applied without the ServiceAccount it names")
	}

	// The downstream admin makes it: applied at a following resync, with no
	// change upstream.
	f.serviceAccount("late")
	f.allowConfigMaps("late", appNS, "get", "create", "patch", "delete")
	_, took = f.waitBD("app", 30*time.Second, "Ready once the ServiceAccount exists", readyFor(id))
	t.Logf("applied %s after the ServiceAccount was made", took)
	if !f.exists(cm(appNS, "cfg")) {
		t.Error("configmap cfg missing")
	}
	// One client per ServiceAccount, not one per reconcile.
	id1, err1 := f.d.identityFor(t.Context(), "late")
	id2, err2 := f.d.identityFor(t.Context(), "late")
	if err1 != nil || err2 != nil || id1 != id2 {
		t.Errorf("identityFor twice: %p (%v), %p (%v); want the same cached client", id1, err1, id2, err2)
	}

	// The ServiceAccount goes: reported at the next resync, its client
	// dropped, and what it applied stays.
	if err := f.down.Delete(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.agentNS, Name: "late"}}); err != nil {
		t.Fatal(err)
	}
	f.waitBD("app", 30*time.Second, "ServiceAccountMissing after the deletion", conditionIs(fleet.DeployedCondition, fleet.ServiceAccountMissingReason))
	f.d.imp.mu.Lock()
	_, cached := f.d.imp.byName["late"]
	f.d.imp.mu.Unlock()
	if cached {
		t.Error("the client of a deleted ServiceAccount is still cached")
	}
	if !f.exists(cm(appNS, "cfg")) {
		t.Error("configmap cfg was pruned when its ServiceAccount went")
	}

	// A ServiceAccount of another namespace cannot be named: the API
	// refuses the field.
	bad := &fleet.BundleDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "other-namespace"},
		Spec:       fleet.BundleDeploymentSpec{Options: fleet.BundleDeploymentOptions{ServiceAccount: "kube-system/admin"}},
	}
	if err := f.up.Create(t.Context(), bad); !apierrors.IsInvalid(err) {
		t.Errorf("serviceAccount kube-system/admin accepted: %v", err)
	}
}

func TestDeployer_AppliesOnlyWhatWasMadeForItsCluster(t *testing.T) {
	f := newFixture(t)
	appNS := "foreign-" + f.suffix
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS}
	foreign := map[string]map[string]string{
		"other-cluster":   {fleet.ClusterLabel: "someone-else", fleet.ClusterNamespaceLabel: f.ws},
		"other-workspace": {fleet.ClusterLabel: f.cluster, fleet.ClusterNamespaceLabel: "ws-other"},
		"unlabelled":      nil,
	}
	for name, labels := range foreign {
		f.deploy(name, configMapYAML(name, "x"), opts, func(bd *fleet.BundleDeployment) { bd.Labels = labels })
	}
	// Positive control, written after the others: once it is applied, the
	// others had their chance.
	id := f.deploy("control", configMapYAML("control", "1"), opts)
	f.waitBD("control", 30*time.Second, "Ready", readyFor(id))
	if !f.exists(cm(appNS, "control")) {
		t.Fatal("control configmap missing")
	}
	for name := range foreign {
		bd, _ := f.waitBD(name, 30*time.Second, "ClusterMismatch", conditionIs(fleet.DeployedCondition, fleet.ClusterMismatchReason))
		wantMessage(t, condition(bd, fleet.DeployedCondition), "not applied", fmt.Sprintf("this agent is cluster %q in workspace %q", f.cluster, f.ws))
		if bd.Status.Display.State != string(fleet.ErrApplied) || bd.Status.AppliedDeploymentID != "" {
			t.Errorf("%s: state %s applied %q", name, bd.Status.Display.State, bd.Status.AppliedDeploymentID)
		}
	}
	// Never applied, however long we look.
	deadline := time.Now().Add(5 * f.opts.ResyncInterval)
	for time.Now().Before(deadline) {
		for name := range foreign {
			if f.exists(cm(appNS, name)) || f.exists(cm(f.agentNS, InventoryName(name))) {
				t.Fatalf("the BundleDeployment %s made for another cluster was applied", name)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Labelled for this cluster after all (a label change, no new spec):
	// applied.
	f.updateBD("unlabelled", func(bd *fleet.BundleDeployment) {
		bd.Labels = map[string]string{fleet.ClusterLabel: f.cluster, fleet.ClusterNamespaceLabel: f.ws}
	})
	f.waitBD("unlabelled", 30*time.Second, "Ready once labelled for this cluster", readyFor(f.getBD("unlabelled").Spec.DeploymentID))

	// Relabelled away from this cluster: nothing of it is pruned either.
	f.updateBD("unlabelled", func(bd *fleet.BundleDeployment) { bd.Labels[fleet.ClusterLabel] = "someone-else" })
	f.waitBD("unlabelled", 30*time.Second, "ClusterMismatch", conditionIs(fleet.DeployedCondition, fleet.ClusterMismatchReason))
	time.Sleep(2 * f.opts.ResyncInterval)
	if !f.exists(cm(appNS, "unlabelled")) {
		t.Error("relabelling a BundleDeployment for another cluster pruned its objects")
	}
}
