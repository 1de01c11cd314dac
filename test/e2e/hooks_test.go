package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/devenv"
)

// hooksBundle is what `fleet apply` writes for a chart with a pre-install
// ConfigMap hook (weight -5), a pre-install Job hook (weight 0) that needs
// that ConfigMap, and a main Deployment whose pod needs it too. The Job runs
// the dev clusters' pause image (no network): `pause echo` exits 0, any
// other command exits 2 with a message on stderr, which is how the failing
// variant fails.
func hooksBundle(name, jobArgs string) *fleet.Bundle {
	chart := map[string]string{
		"chart/Chart.yaml": "apiVersion: v2\nname: " + name + "\nversion: 0.1.0\n",
		"chart/templates/settings.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-settings
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
    helm.sh/hook-weight: "-5"
data:
  greeting: hello
`,
		"chart/templates/job.yaml": `apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-migrate
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
    helm.sh/hook-weight: "0"
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: migrate
        image: registry.k8s.io/pause:3.10
        imagePullPolicy: IfNotPresent
        args: ` + jobArgs + `
        terminationMessagePolicy: FallbackToLogsOnError
        volumeMounts: [{name: settings, mountPath: /settings}]
      volumes:
      - name: settings
        configMap: {name: {{ .Release.Name }}-settings}
`,
		"chart/templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: 1
  selector: {matchLabels: {app: {{ .Release.Name }}}}
  template:
    metadata: {labels: {app: {{ .Release.Name }}}}
    spec:
      containers:
      - name: app
        image: registry.k8s.io/pause:3.10
        imagePullPolicy: IfNotPresent
        volumeMounts: [{name: settings, mountPath: /settings}]
      volumes:
      - name: settings
        configMap: {name: {{ .Release.Name }}-settings}
`,
	}
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace: name,
				Helm:             &fleet.HelmOptions{Chart: "chart", TimeoutSeconds: 120},
				IgnoreOptions:    &fleet.IgnoreOptions{},
				CorrectDrift:     &fleet.CorrectDrift{},
			},
			Targets: []fleet.BundleTarget{{Name: "dev-1", ClusterName: "dev-1"}},
		},
	}
	for _, p := range []string{"chart/Chart.yaml", "chart/templates/settings.yaml", "chart/templates/job.yaml", "chart/templates/deployment.yaml"} {
		b.Spec.Resources = append(b.Spec.Resources, fleet.BundleResource{Name: p, Content: chart[p]})
	}
	return b
}

// testHooks: on a real cluster (a kubelet runs the hook's pod), a chart's
// pre-install Job hook runs to completion before the main Deployment is
// created, the Deployment's pod starts with what the hook phase made, and
// the hooks are not the release's resources; a hook Job that fails stops
// its deployment with a HookFailed condition carrying the container's
// message, and its main objects are never created.
func testHooks(t *testing.T) {
	cs := clientset(t, "dev-1")
	ok := hooksBundle("hooks-ok", `["echo", "migrated"]`)
	must(t, up.Create(t.Context(), ok))
	t.Cleanup(func() { _ = up.Delete(context.Background(), ok) }) // t.Context() is done when cleanups run
	must(t, devenv.BundleReady(t.Context(), up, ws, ok.Name, 1, 4*time.Minute))

	job, err := cs.BatchV1().Jobs(ok.Name).Get(t.Context(), ok.Name+"-migrate", metav1.GetOptions{})
	must(t, err)
	d, err := cs.AppsV1().Deployments(ok.Name).Get(t.Context(), ok.Name, metav1.GetOptions{})
	must(t, err)
	must(t, rolledOut(d))
	if job.Status.CompletionTime == nil || job.Status.Succeeded != 1 {
		t.Fatalf("hook Job %s: not complete (%+v)", job.Name, job.Status)
	}
	// Timestamps have a second's resolution: completed no later than the
	// Deployment was created.
	if job.Status.CompletionTime.After(d.CreationTimestamp.Time) {
		t.Errorf("the hook Job completed at %s, after the main Deployment was created at %s", job.Status.CompletionTime, d.CreationTimestamp)
	}
	bds := &fleet.BundleDeploymentList{}
	must(t, up.List(t.Context(), bds, client.MatchingLabels{fleet.BundleLabel: ok.Name}))
	if len(bds.Items) != 1 {
		t.Fatalf("%d BundleDeployments of %s, want 1", len(bds.Items), ok.Name)
	}
	for _, r := range bds.Items[0].Status.Resources {
		if r.Kind != "Deployment" {
			t.Errorf("status.resources holds %s %s: hooks are not release resources", r.Kind, r.Name)
		}
	}

	bad := hooksBundle("hooks-bad", `["migrate-on-purpose"]`)
	must(t, up.Create(t.Context(), bad))
	t.Cleanup(func() { _ = up.Delete(context.Background(), bad) })
	var msg string
	must(t, devenv.Poll(t.Context(), 4*time.Minute, func() error {
		l := &fleet.BundleDeploymentList{}
		if err := up.List(t.Context(), l, client.MatchingLabels{fleet.BundleLabel: bad.Name}); err != nil {
			return err
		}
		if len(l.Items) != 1 {
			return fmt.Errorf("%d BundleDeployments of %s", len(l.Items), bad.Name)
		}
		bd := l.Items[0]
		c := meta.FindStatusCondition(bd.Status.Conditions, fleet.DeployedCondition)
		if c == nil || c.Reason != "HookFailed" || bd.Status.Display.State != string(fleet.ErrApplied) {
			return fmt.Errorf("BundleDeployment %s: state %q, Deployed %+v", bd.Name, bd.Status.Display.State, c)
		}
		msg = c.Message
		return nil
	}))
	for _, want := range []string{"pre-install hook Job hooks-bad/hooks-bad-migrate failed", "BackoffLimitExceeded", "exited with code 2", `unknown command "migrate-on-purpose"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("HookFailed message %q does not say %q", msg, want)
		}
	}
	if _, err := cs.AppsV1().Deployments(bad.Name).Get(t.Context(), bad.Name, metav1.GetOptions{}); err == nil {
		t.Errorf("the main Deployment of %s was created although its pre-install hook failed", bad.Name)
	}
	t.Logf("failed hook reported: %s", msg)
}
