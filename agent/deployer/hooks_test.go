package deployer

import (
	"errors"
	"fmt"
	"k8s.io/client-go/util/retry"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
)

// hookCM is a ConfigMap hook: done as soon as it exists.
func hookCM(name, events, weight, policy string) string {
	s := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  annotations:\n    helm.sh/hook: %s\n    helm.sh/hook-weight: %q\n", name, events, weight)
	if policy != "" {
		s += "    helm.sh/hook-delete-policy: " + policy + "\n"
	}
	return s
}

// blockingJob is a Job hook that never completes here: the envtest has no
// kubelet, so its pod never runs.
func blockingJob(name, events, weight, policy string) string {
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: %s
  annotations:
    helm.sh/hook: %s
    helm.sh/hook-weight: %q
    helm.sh/hook-delete-policy: %s
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: fleet-pause}]
`, name, events, weight, policy)
}

func widgetCRD(group string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.%[1]s
spec:
  group: %[1]s
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`, group)
}

// phased is content as the renderer writes it (renderer.orderPhases).
func phased(sections ...bundlecontent.Section) string {
	return string(bundlecontent.JoinPhases(sections))
}

func section(p bundlecontent.Phase, d ...string) bundlecontent.Section {
	return bundlecontent.Section{Phase: p, YAML: []byte("---\n" + docs(d...))}
}

// TestHooks_PhasesInOrderAFailedHookStopsTheDeployment deploys a chart's
// worth of phases: CRDs, pre-install hooks of weights -5, 0 and 5, main
// objects (one a custom resource of the CRD), post-install, pre-upgrade,
// post-upgrade and pre-delete hooks. A pre-install Job that cannot finish
// (no kubelet here) stops the deployment after the weight -5 hook and
// before the weight 5 one and the main objects, with a HookFailed
// condition naming it; without it, the phases run in order, hooks stay out
// of the inventory, and the deletion runs the pre-delete hook and prunes
// only the main objects.
func TestHooks_PhasesInOrderAFailedHookStopsTheDeployment(t *testing.T) {
	f := newFixture(t)
	appNS := "hooks-" + f.suffix
	group := f.suffix + ".example.com"
	widget := fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata:\n  name: w\nspec: {size: 1}\n", group)
	content := func(mainData string, withBlockingJob bool) string {
		pre := []string{hookCM("pre-early", "pre-install", "-5", "")}
		if withBlockingJob {
			pre = append(pre, blockingJob("pre-job", "pre-install", "0", "hook-failed"))
		}
		pre = append(pre, hookCM("pre-late", "pre-install", "5", ""))
		return phased(
			section(bundlecontent.PhaseCRDs, widgetCRD(group)),
			section(bundlecontent.PhasePreInstall, pre...),
			section(bundlecontent.PhasePreUpgrade, hookCM("pre-upgrade", "pre-upgrade", "0", "")),
			section(bundlecontent.PhaseMain, configMapYAML("main", mainData), widget),
			section(bundlecontent.PhasePostInstall, hookCM("post-install", "post-install", "0", ""), hookCM("post-install-tmp", "post-install", "1", "hook-succeeded")),
			section(bundlecontent.PhasePostUpgrade, hookCM("post-upgrade", "post-upgrade", "0", "")),
			section(bundlecontent.PhasePreDelete, hookCM("pre-delete", "pre-delete", "0", "")),
		)
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS, Helm: &fleet.HelmOptions{TimeoutSeconds: 3}}

	// 1. The blocking Job: the deployment stops at it.
	f.deploy("hooked", content("one", true), opts)
	bd, _ := f.waitBD("hooked", 60*time.Second, "ErrApplied by the pre-install Job", func(bd *fleet.BundleDeployment) bool {
		return condition(bd, fleet.DeployedCondition).Reason == HookFailedReason
	})
	c := condition(bd, fleet.DeployedCondition)
	wantMsg := "pre-install hook Job " + appNS + "/pre-job did not finish within 3s (helm.timeoutSeconds)"
	if !strings.Contains(c.Message, wantMsg) || bd.Status.Display.State != string(fleet.ErrApplied) {
		t.Errorf("state %q, Deployed condition %q, want ErrApplied and a message containing %q", bd.Status.Display.State, c.Message, wantMsg)
	}
	crd := &apiextv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group}}
	if !f.exists(crd) {
		t.Errorf("the CRD was not applied before the pre-install hooks")
	} else if !crdEstablished(crd) {
		t.Errorf("the CRD is not Established: %+v", crd.Status.Conditions)
	}
	if !f.exists(cm(appNS, "pre-early")) {
		t.Errorf("the weight -5 hook did not run before the weight 0 one")
	}
	for _, o := range []client.Object{cm(appNS, "pre-late"), cm(appNS, "main")} {
		if f.exists(o) {
			t.Errorf("%s ran although the weight 0 hook before it failed", o.GetName())
		}
	}
	// hook-failed: the failed Job is deleted.
	testenv.Eventually(t, 30*time.Second, "the failed hook Job deleted (hook-failed)", func() error {
		if f.exists(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "pre-job"}}) {
			return errors.New("still there")
		}
		return nil
	})

	// 2. Without it: every phase of an install, in order.
	id := f.deploy("hooked", content("one", false), opts)
	bd, _ = f.waitBD("hooked", 60*time.Second, "Ready", readyFor(id))
	if !f.exists(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.agentNS, Name: DeleteHooksName("hooked")}}) {
		t.Errorf("the pre-delete hook is not kept for the deletion")
	}
	for _, name := range []string{"pre-early", "pre-late", "main", "post-install"} {
		if !f.exists(cm(appNS, name)) {
			t.Errorf("configmap %s missing after the install", name)
		}
	}
	for _, name := range []string{"pre-upgrade", "post-upgrade", "pre-delete", "post-install-tmp"} {
		if f.exists(cm(appNS, name)) {
			t.Errorf("configmap %s exists after an install (upgrade and delete hooks do not run; hook-succeeded deletes)", name)
		}
	}
	w := &unstructured.Unstructured{}
	w.SetAPIVersion(group + "/v1")
	w.SetKind("Widget")
	w.SetNamespace(appNS)
	w.SetName("w")
	if !f.exists(w) {
		t.Errorf("the custom resource was not applied")
	}
	var res []string
	for _, r := range bd.Status.Resources {
		res = append(res, r.Kind+" "+r.Name)
	}
	if got, want := strings.Join(res, ", "), "CustomResourceDefinition widgets."+group+", ConfigMap main, Widget w"; got != want {
		t.Errorf("status.resources = %s, want %s (hooks are not release resources)", got, want)
	}
	earlyUID := uidOf(t, f, appNS, "pre-early")

	// 3. An upgrade: pre-upgrade and post-upgrade hooks, not the install ones.
	id = f.deploy("hooked", content("two", false), opts)
	f.waitBD("hooked", 60*time.Second, "Ready with the upgrade", readyFor(id))
	for _, name := range []string{"pre-upgrade", "post-upgrade"} {
		if !f.exists(cm(appNS, name)) {
			t.Errorf("configmap %s missing after the upgrade", name)
		}
	}
	if uidOf(t, f, appNS, "pre-early") != earlyUID {
		t.Errorf("the pre-install hook ran again on an upgrade")
	}

	// 4. Deletion: the pre-delete hook runs, the main objects are pruned,
	// the hooks are left as Helm leaves them, and the kept delete hooks go.
	if err := f.up.Delete(t.Context(), &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "hooked"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "main objects pruned", func() error {
		if f.exists(cm(appNS, "main")) || f.exists(w) {
			return errors.New("main objects still there")
		}
		return nil
	})
	if !f.exists(cm(appNS, "pre-delete")) {
		t.Errorf("the pre-delete hook did not run")
	}
	if !f.exists(cm(appNS, "post-install")) {
		t.Errorf("a hook was pruned with the release's resources")
	}
	testenv.Eventually(t, 30*time.Second, "the kept delete hooks removed", func() error {
		if f.exists(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.agentNS, Name: DeleteHooksName("hooked")}}) {
			return errors.New("still there")
		}
		return nil
	})
}

func crdEstablished(crd *apiextv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
			return true
		}
	}
	return false
}

func uidOf(t *testing.T, f *fixture, ns, name string) string {
	t.Helper()
	o := cm(ns, name)
	if !f.exists(o) {
		t.Fatalf("configmap %s/%s missing", ns, name)
	}
	return string(o.UID)
}

// TestHooks_OldContentHasNoHooks: content without phase markers (what a
// controller older than phases wrote) is applied as one set, hooks
// included, as before.
func TestHooks_OldContentHasNoHooks(t *testing.T) {
	f := newFixture(t)
	appNS := "old-" + f.suffix
	id := f.deploy("old", docs(configMapYAML("main", "x"), hookCM("was-a-hook", "pre-install", "0", "")), fleet.BundleDeploymentOptions{DefaultNamespace: appNS})
	bd, _ := f.waitBD("old", 60*time.Second, "Ready", readyFor(id))
	if len(bd.Status.Resources) != 2 {
		t.Errorf("status.resources = %v, want both objects as before", bd.Status.Resources)
	}
}

// TestHealth_WaitForJobs: a started Job is ready as kstatus says, unless
// helm.waitForJobs asks for its completion. The envtest runs no Job
// controller: the test writes the status it would write when it starts
// the Job's pod (the e2e suite runs real Jobs to completion).
func TestHealth_WaitForJobs(t *testing.T) {
	f := newFixture(t)
	appNS := "jobs-" + f.suffix
	job := "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: work\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: c, image: fleet-pause}]\n"
	id := f.deploy("jobs", job, fleet.BundleDeploymentOptions{DefaultNamespace: appNS})
	testenv.Eventually(t, 60*time.Second, "the Job applied and marked started", func() error {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "work"}}
		if err := f.down.Get(t.Context(), client.ObjectKeyFromObject(j), j); err != nil {
			return err
		}
		now := metav1.Now()
		j.Status.StartTime, j.Status.Active = &now, 1
		return f.down.Status().Update(t.Context(), j)
	})
	f.waitBD("jobs", 60*time.Second, "Ready without waitForJobs", readyFor(id))

	id = f.deploy("jobs", job, fleet.BundleDeploymentOptions{DefaultNamespace: appNS, Helm: &fleet.HelmOptions{WaitForJobs: true, TimeoutSeconds: 2}})
	bd, _ := f.waitBD("jobs", 60*time.Second, "NotReady on the Job with waitForJobs", func(bd *fleet.BundleDeployment) bool {
		return bd.Status.AppliedDeploymentID == id && bd.Status.Display.State == string(fleet.NotReady) && len(bd.Status.NonReadyStatus) == 1
	})
	if nr := bd.Status.NonReadyStatus[0]; nr.Kind != "Job" || nr.Name != "work" || !strings.Contains(nr.Summary.String(), "waitForJobs") {
		t.Errorf("nonReadyStatus = %+v, want Job work waiting for completion", nr)
	}
	// helm.timeoutSeconds bounds the wait: the health timeout is reported.
	f.waitBD("jobs", 30*time.Second, "health timed out after timeoutSeconds", func(bd *fleet.BundleDeployment) bool {
		return condition(bd, fleet.ReadyCondition).Reason == HealthTimeoutReason
	})
}

// TestHooks_RunAsTheServiceAccount: hooks are applied as the Bundle's
// serviceAccount, like its other objects: a hook of a kind it may not
// write is refused by the API server (the agent itself could), the
// deployment stops there with HookFailed naming the hook and the refusal,
// and the hooks it may write run.
func TestHooks_RunAsTheServiceAccount(t *testing.T) {
	f := newFixture(t)
	appNS := "sa-hooks-" + f.suffix
	f.downstreamNamespace(appNS)
	f.serviceAccount("hooker")
	f.allowConfigMaps("hooker", appNS, "get", "list", "watch", "create", "update", "patch", "delete")
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS, ServiceAccount: "hooker", Helm: &fleet.HelmOptions{TimeoutSeconds: 5}}

	f.deploy("sa", phased(
		section(bundlecontent.PhasePreInstall, hookCM("pre-ok", "pre-install", "-1", ""), blockingJob("pre-job", "pre-install", "0", "hook-failed")),
		section(bundlecontent.PhaseMain, configMapYAML("main", "1")),
	), opts)
	bd, _ := f.waitBD("sa", 60*time.Second, "HookFailed", conditionIs(fleet.DeployedCondition, HookFailedReason))
	wantMessage(t, condition(bd, fleet.DeployedCondition), "pre-install hook Job "+appNS+"/pre-job", "forbidden", "system:serviceaccount:"+f.agentNS+":hooker")
	if !f.exists(cm(appNS, "pre-ok")) {
		t.Errorf("the hook the ServiceAccount may write did not run")
	}
	if f.exists(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "pre-job"}}) {
		t.Errorf("the Job hook was created although the ServiceAccount may not")
	}
	if f.exists(cm(appNS, "main")) {
		t.Errorf("the main objects were applied after a refused hook")
	}

	// What it may write: every phase runs.
	id := f.deploy("sa", phased(
		section(bundlecontent.PhasePreInstall, hookCM("pre-ok", "pre-install", "-1", "")),
		section(bundlecontent.PhaseMain, configMapYAML("main", "1")),
		section(bundlecontent.PhasePostInstall, hookCM("post-ok", "post-install", "0", "")),
	), opts)
	f.waitBD("sa", 60*time.Second, "Ready", readyFor(id))
	for _, n := range []string{"pre-ok", "main", "post-ok"} {
		if !f.exists(cm(appNS, n)) {
			t.Errorf("configmap %s missing", n)
		}
	}
}

// TestHooks_RetriedDeploymentDoesNotRunItsHooksAgain: Helm runs a
// release's hooks once. When the agent applies the same deployment again
// because its status never reached the upstream (the status write failed,
// the agent restarted, the status was lost), the hooks that already ran
// are not run again: a before-hook-creation hook would be deleted and made
// again (a Job run twice). Seen on real clusters as a hook Job completing
// after the main objects.
func TestHooks_RetriedDeploymentDoesNotRunItsHooksAgain(t *testing.T) {
	f := newFixture(t)
	appNS := "retry-" + f.suffix
	id := f.deploy("retried", phased(
		section(bundlecontent.PhasePreInstall, hookCM("pre", "pre-install", "0", "")),
		section(bundlecontent.PhaseMain, configMapYAML("main", "x")),
		section(bundlecontent.PhasePostInstall, hookCM("post", "post-install", "0", "")),
	), fleet.BundleDeploymentOptions{DefaultNamespace: appNS})
	bd, _ := f.waitBD("retried", 60*time.Second, "Ready", readyFor(id))
	pre, post := uidOf(t, f, appNS, "pre"), uidOf(t, f, appNS, "post")
	applied := bd.Status.AppliedAt

	// The status is lost: the agent applies the same deployment again.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		bd := f.getBD("retried")
		bd.Status.AppliedDeploymentID = ""
		return f.up.Status().Update(t.Context(), bd)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.waitBD("retried", 60*time.Second, "applied again and Ready", func(bd *fleet.BundleDeployment) bool {
		return readyFor(id)(bd) && bd.Status.AppliedAt != nil && applied != nil && !bd.Status.AppliedAt.Equal(applied)
	})
	if got := uidOf(t, f, appNS, "pre"); got != pre {
		t.Errorf("the pre-install hook ran again for the same deployment (uid %s, was %s)", got, pre)
	}
	if got := uidOf(t, f, appNS, "post"); got != post {
		t.Errorf("the post-install hook ran again for the same deployment (uid %s, was %s)", got, post)
	}
}
