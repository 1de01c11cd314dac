package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/devenv"
	"github.com/gitops-fleet/fleet/internal/manifest"
	"github.com/gitops-fleet/fleet/review"
)

// Broken is what makes a pod never start: an image the nodes do not have,
// never pulled.
const (
	goodImage   = "image: registry.k8s.io/pause:3.10\n              imagePullPolicy: IfNotPresent"
	brokenImage = "image: registry.invalid/fleet-e2e:broken\n              imagePullPolicy: Never"
)

// target is one downstream cluster the Bundles below deploy to: its fleet
// Cluster's name and its dev cluster.
type target struct{ name, dev string }

// testBundles: Bundles as Fleet's `fleet apply` writes them (testdata/bundles:
// `ignore: {}`, `correctDrift: {}`, fleet.yaml among the resources, a chart
// at the root), applied with `kubectl apply` (strict field validation, as a
// user applies them), deploy on the real downstream clusters dev-1 and dev-2
// (both labelled env=dev) with Fleet's meaning: a dependsOn chain, values
// templated per cluster, a partitioned rollout that stops at a failing
// cluster, a chart from a Helm repository; `fleet render bundle` and `fleet
// diff --live` show the templated Bundle as deployed. The scenarios are
// independent: they run at once.
func testBundles(t *testing.T, dev2Name string) {
	targets := []target{{"dev-1", "dev-1"}, {dev2Name, "dev-2"}}
	t.Run("dependsOn chain A → B (by name) → C (by selector, acceptedStates): each waits, WaitingForDependency, and deploys after its dependency is Ready", func(t *testing.T) {
		t.Parallel()
		testDependsOn(t, targets)
	})
	t.Run("values templated per cluster (${ .ClusterName }, .ClusterLabels, .ClusterValues, templateValues, global.fleet.clusterLabels); fleet render bundle and fleet diff --live show them as deployed", func(t *testing.T) {
		t.Parallel()
		testTemplatedValues(t, targets)
	})
	t.Run("values Fleet's fleet apply moved into a values Secret (spec.valuesHash): each cluster gets the Secret's values, the target's too", func(t *testing.T) {
		t.Parallel()
		testValuesSecret(t, targets)
	})
	t.Run("partitioned rollout: a change whose pod cannot start stays on the first partition, the second keeps the old version; a fix rolls through both", func(t *testing.T) {
		t.Parallel()
		testPartitions(t, targets)
	})
	t.Run("a chart from a Helm repository served by this test: fleet apply fetches and embeds it, the Bundle deploys it with the fleet.yaml's values", func(t *testing.T) {
		t.Parallel()
		testRemoteChart(t, targets)
	})
}

// fixture writes testdata/bundles/<name> with the replacements (old, new
// pairs) made, and returns its path.
func fixture(t *testing.T, name string, replace ...string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "bundles", name))
	must(t, err)
	out := strings.NewReplacer(replace...).Replace(string(data))
	for i := 0; i < len(replace); i += 2 {
		if !strings.Contains(string(data), replace[i]) {
			t.Fatalf("fixture %s has no %q to replace", name, replace[i])
		}
	}
	p := filepath.Join(tempDir(t), name)
	must(t, os.WriteFile(p, []byte(out), 0o600))
	return p
}

// tempDir is t.TempDir() without the test's name in it: kubectl reads a
// comma in `-f` as a list of files.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fleet-e2e-bundles-")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// kubectlApply applies a Bundle file to the upstream as a user does, with
// kubectl's strict field validation: a field our schema lacked would fail it.
func kubectlApply(t *testing.T, path string) {
	t.Helper()
	out, err := bin(t, "kubectl", "--kubeconfig", cluster("upstream").KubeconfigPath(), "apply", "--validate=strict", "-f", path)
	if err != nil {
		t.Fatalf("kubectl apply --validate=strict -f %s: %v\n%s", filepath.Base(path), err, out)
	}
	if strings.Contains(out, "unknown field") {
		t.Fatalf("kubectl apply warned of unknown fields: %s", out)
	}
}

// removeBundles deletes the Bundles when the test ends (t.Context() is
// canceled by then).
func removeBundles(t *testing.T, names ...string) {
	t.Cleanup(func() {
		for _, n := range names {
			_ = up.Delete(context.Background(), &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: n}})
		}
	})
}

// deploymentOf returns Bundle bundle's BundleDeployment on Cluster cl.
func deploymentOf(t *testing.T, cl, bundle string) (*fleet.BundleDeployment, error) {
	ns := getCluster(t, cl).Status.Namespace
	bd := &fleet.BundleDeployment{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: bundle}, bd); err != nil {
		return nil, err
	}
	return bd, nil
}

func deployedReason(bd *fleet.BundleDeployment) (reason, message string) {
	if c := meta.FindStatusCondition(bd.Status.Conditions, fleet.DeployedCondition); c != nil {
		reason = c.Reason
	}
	if c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ReadyCondition); c != nil {
		message = c.Message
	}
	return reason, message
}

// availableSince is when Deployment d last became Available.
func availableSince(d *appsv1.Deployment) (time.Time, error) {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == "True" {
			return c.LastTransitionTime.Time, nil
		}
	}
	return time.Time{}, fmt.Errorf("deployment %s/%s is not Available", d.Namespace, d.Name)
}

// testDependsOn: A's pod cannot start at first. On each cluster B waits for
// A and C for B (WaitingForDependency, state WaitApplied, Fleet's message
// naming the dependency), and neither B's nor C's objects exist. Once A is
// fixed, the chain deploys in order: B's Deployment is created after A's
// became Available, C's ConfigMap after B's (Ready 5 s after its pod,
// minReadySeconds) became Available.
func testDependsOn(t *testing.T, targets []target) {
	removeBundles(t, "e2e-chain-c", "e2e-chain-b", "e2e-chain-a")
	kubectlApply(t, fixture(t, "chain-a.yaml", goodImage, brokenImage))
	kubectlApply(t, fixture(t, "chain-b.yaml"))
	kubectlApply(t, fixture(t, "chain-c.yaml"))

	for _, tg := range targets {
		must(t, devenv.Poll(t.Context(), 3*time.Minute, func() error {
			a, err := deploymentOf(t, tg.name, "e2e-chain-a")
			if err != nil {
				return err
			}
			if a.Status.AppliedDeploymentID == "" || a.Status.Ready {
				return fmt.Errorf("%s: e2e-chain-a applied %q, ready %v: want applied and not Ready", tg.name, a.Status.AppliedDeploymentID, a.Status.Ready)
			}
			for _, w := range []struct{ bundle, waitsFor string }{{"e2e-chain-b", "e2e-chain-a"}, {"e2e-chain-c", "e2e-chain-b"}} {
				bd, err := deploymentOf(t, tg.name, w.bundle)
				if err != nil {
					return err
				}
				reason, msg := deployedReason(bd)
				if reason != fleet.WaitingForDependencyReason || bd.Status.Display.State != string(fleet.WaitApplied) ||
					!strings.Contains(msg, "dependent bundle(s) are not ready: ["+w.waitsFor+"]") {
					return fmt.Errorf("%s: %s: %s %q, state %q; want WaitingForDependency on %s", tg.name, w.bundle, reason, msg, bd.Status.Display.State, w.waitsFor)
				}
			}
			return nil
		}))
		cs := clientset(t, tg.dev)
		if _, err := cs.AppsV1().Deployments("e2e-chain").Get(t.Context(), "chain-b", metav1.GetOptions{}); err == nil {
			t.Errorf("%s: chain-b exists while e2e-chain-a is not Ready", tg.dev)
		}
		if _, err := cs.CoreV1().ConfigMaps("e2e-chain").Get(t.Context(), "chain-c", metav1.GetOptions{}); err == nil {
			t.Errorf("%s: chain-c exists while e2e-chain-b is not deployed", tg.dev)
		}
	}
	t.Log("B and C wait for their dependencies on both clusters; fixing A")

	kubectlApply(t, fixture(t, "chain-a.yaml"))
	for _, b := range []string{"e2e-chain-a", "e2e-chain-b", "e2e-chain-c"} {
		must(t, devenv.BundleReady(t.Context(), up, ws, b, len(targets), 3*time.Minute))
	}
	for _, tg := range targets {
		cs := clientset(t, tg.dev)
		a, err := cs.AppsV1().Deployments("e2e-chain").Get(t.Context(), "chain-a", metav1.GetOptions{})
		must(t, err)
		b, err := cs.AppsV1().Deployments("e2e-chain").Get(t.Context(), "chain-b", metav1.GetOptions{})
		must(t, err)
		c, err := cs.CoreV1().ConfigMaps("e2e-chain").Get(t.Context(), "chain-c", metav1.GetOptions{})
		must(t, err)
		aReady, err := availableSince(a)
		must(t, err)
		bReady, err := availableSince(b)
		must(t, err)
		// Timestamps have a second's resolution.
		if b.CreationTimestamp.Unix() < aReady.Unix() {
			t.Errorf("%s: chain-b created at %s, before chain-a was Available at %s", tg.dev, b.CreationTimestamp, aReady)
		}
		if c.CreationTimestamp.Unix() < bReady.Unix() {
			t.Errorf("%s: chain-c created at %s, before chain-b was Available at %s", tg.dev, c.CreationTimestamp, bReady)
		}
	}
}

// setTemplateValues sets (or with nil removes) a Cluster's
// spec.templateValues, also from a cleanup.
func setTemplateValues(ctx context.Context, name string, values map[string]any) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &fleet.Cluster{}
		if err := up.Get(ctx, client.ObjectKey{Namespace: ws, Name: name}, c); err != nil {
			return err
		}
		c.Spec.TemplateValues = nil
		if values != nil {
			c.Spec.TemplateValues = &fleet.GenericMap{Data: values}
		}
		return up.Update(ctx, c)
	})
}

// clusterFile writes Cluster name as a YAML file, as it would be kept in
// git.
func clusterFile(t *testing.T, dir, name string) string {
	t.Helper()
	c := getCluster(t, name)
	c.APIVersion, c.Kind = fleet.GroupVersion.String(), "Cluster"
	c.ManagedFields, c.ResourceVersion, c.UID, c.Generation = nil, "", "", 0
	c.Status = fleet.ClusterStatus{}
	data, err := yaml.Marshal(c)
	must(t, err)
	p := filepath.Join(dir, "cluster-"+name+".yaml")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(p, data, 0o600))
	return p
}

// testValuesSecret: a Bundle with spec.valuesHash and its values Secret,
// applied as Fleet's fleet apply writes them (the Secret first), deploys
// with the Secret's values on each cluster, the target's over the Bundle's;
// the BundleDeployments carry none of them.
func testValuesSecret(t *testing.T, targets []target) {
	const name = "e2e-values-secret"
	removeBundles(t, name)
	t.Cleanup(func() {
		_ = up.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}})
	})
	kubectlApply(t, fixture(t, "values-secret.yaml"))
	must(t, devenv.BundleReady(t.Context(), up, ws, name, len(targets), 3*time.Minute))
	want := map[string]string{"color": "from-the-values-secret", "tier": "dev-from-the-values-secret"}
	for _, tg := range targets {
		cm, err := clientset(t, tg.dev).CoreV1().ConfigMaps(name).Get(t.Context(), name, metav1.GetOptions{})
		must(t, err)
		if !maps.Equal(cm.Data, want) {
			t.Errorf("%s: ConfigMap %s holds %v, want %v", tg.dev, name, cm.Data, want)
		}
		bd, err := deploymentOf(t, tg.name, name)
		must(t, err)
		if h := bd.Spec.Options.Helm; h != nil && h.Values != nil {
			t.Errorf("%s: BundleDeployment %s/%s carries values %v", tg.name, bd.Namespace, bd.Name, h.Values.Data)
		}
	}
}

// testTemplatedValues: each cluster's ConfigMap holds its own values,
// templated from its name, its labels and its spec.templateValues, with the
// target's value; `fleet render bundle --cluster` prints exactly what is
// deployed there; `fleet diff --live`, as a reviewer through the cluster
// proxy, says the Bundle changes nothing on dev-1 (it is deployed as the
// head side has it).
func testTemplatedValues(t *testing.T, targets []target) {
	colors := map[string]string{targets[0].name: "blue", targets[1].name: "green"}
	for _, tg := range targets {
		must(t, setTemplateValues(t.Context(), tg.name, map[string]any{"color": colors[tg.name]}))
	}
	t.Cleanup(func() {
		for _, tg := range targets {
			if err := setTemplateValues(context.Background(), tg.name, nil); err != nil {
				t.Errorf("removing the templateValues of %s: %v", tg.name, err)
			}
		}
	})
	removeBundles(t, "e2e-values")
	bundleFile := fixture(t, "values.yaml")
	kubectlApply(t, bundleFile)
	must(t, devenv.BundleReady(t.Context(), up, ws, "e2e-values", len(targets), 3*time.Minute))

	for _, tg := range targets {
		want := map[string]string{"cluster": tg.name, "color": colors[tg.name], "env": "dev", "fromLabel": "dev",
			"greeting": "hello-" + colors[tg.name], "tier": "dev-tier"}
		cm, err := clientset(t, tg.dev).CoreV1().ConfigMaps("e2e-values").Get(t.Context(), "e2e-values", metav1.GetOptions{})
		must(t, err)
		if !maps.Equal(cm.Data, want) {
			t.Errorf("%s: ConfigMap e2e-values holds %v, want %v", tg.dev, cm.Data, want)
		}

		// fleet render bundle --cluster: what is deployed there.
		out, err := bin(t, "fleet", "render", "bundle", "--bundle", bundleFile, "--cluster", clusterFile(t, tempDir(t), tg.name))
		if err != nil {
			t.Fatalf("fleet render bundle for %s: %v\n%s", tg.name, err, out)
		}
		objs, err := manifest.Decode([]byte(out))
		must(t, err)
		if len(objs) != 1 || objs[0].GetKind() != "ConfigMap" {
			t.Fatalf("fleet render bundle for %s printed %d objects, want the ConfigMap:\n%s", tg.name, len(objs), out)
		}
		rendered, _, _ := unstructuredStrings(objs[0].Object, "data")
		if !maps.Equal(rendered, cm.Data) {
			t.Errorf("fleet render bundle for %s: data %v, deployed %v", tg.name, rendered, cm.Data)
		}
	}

	// fleet diff --live, as a reviewer with clusters/proxy on dev-1 and the
	// right to edit the Bundle's namespace there: the change adds the
	// Bundle, which is deployed exactly so already.
	const reviewer = "e2e-bundle-reviewer"
	grantProxy(t, reviewer, "dev-1")
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "e2e-values", Name: reviewer},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "fleet:" + reviewer}},
	}
	_, err := clientset(t, "dev-1").RbacV1().RoleBindings(rb.Namespace).Create(t.Context(), rb, metav1.CreateOptions{})
	must(t, err)
	repo := tempDir(t)
	base, head := filepath.Join(repo, "base"), filepath.Join(repo, "head")
	clusterFile(t, base, "dev-1")
	clusterFile(t, head, "dev-1")
	data, err := os.ReadFile(bundleFile)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(head, "bundle.yaml"), data, 0o600))
	kc := writeKubeconfig(t, upstreamUser(t, reviewer))
	var got []review.BundleLive
	must(t, devenv.Poll(t.Context(), time.Minute, func() error {
		out, err := bin(t, "fleet", "diff", "--base", base, "--head", head, "--live", "--kubeconfig", kc, "-o", "json")
		// Exit status 1: the change adds a Bundle to dev-1.
		if ee := (*exec.ExitError)(nil); err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 1) {
			return fmt.Errorf("fleet diff --live: %v\n%s", err, out)
		}
		var doc struct {
			Clusters []struct {
				Cluster      string              `json:"cluster"`
				BundlesAdded []string            `json:"bundlesAdded"`
				BundlesLive  []review.BundleLive `json:"bundlesLive"`
			} `json:"clusters"`
		}
		start := strings.Index(out, "{")
		if start < 0 {
			return fmt.Errorf("fleet diff -o json printed no JSON:\n%s", out)
		}
		if err := json.Unmarshal([]byte(out[start:]), &doc); err != nil {
			return fmt.Errorf("fleet diff -o json: %v\n%s", err, out)
		}
		if len(doc.Clusters) != 1 || doc.Clusters[0].Cluster != ws+"/dev-1" || len(doc.Clusters[0].BundlesLive) != 1 {
			return fmt.Errorf("fleet diff --live: want dev-1 with one Bundle dry-run:\n%s", out)
		}
		got = doc.Clusters[0].BundlesLive
		if got[0].Error != "" {
			return fmt.Errorf("fleet diff --live could not ask dev-1: %s", got[0].Error)
		}
		return nil
	}))
	if got[0].Bundle != "e2e-values" || len(got[0].Lines) != 1 || got[0].Lines[0] != review.NothingChanges {
		t.Errorf("fleet diff --live on dev-1: %+v; want e2e-values: %q", got, review.NothingChanges)
	}
}

// unstructuredStrings reads a map of strings at path.
func unstructuredStrings(obj map[string]any, path ...string) (map[string]string, bool, error) {
	out := map[string]string{}
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	m, ok := cur.(map[string]any)
	if !ok {
		return nil, false, nil
	}
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out, true, nil
}

// version is the e2e-version annotation of the pod template of the
// partitioned Bundle's Deployment on a dev cluster.
func version(t *testing.T, dev string) (string, *appsv1.Deployment, error) {
	d, err := clientset(t, dev).AppsV1().Deployments("e2e-partitions").Get(t.Context(), "e2e-partitions", metav1.GetOptions{})
	if err != nil {
		return "", nil, err
	}
	return d.Spec.Template.Annotations["e2e-version"], d, nil
}

// testPartitions: partitions "first" (dev-1) and "second" (dev-2), at most
// one cluster unavailable. A change whose pod cannot start reaches dev-1
// only: dev-2 keeps the old version (its BundleDeployment holds the change
// staged), and the Bundle's status says why (one cluster unavailable of one
// allowed, partition first's unavailable cluster). A fix then reaches dev-1
// at once (an unavailable cluster always gets it) and, once dev-1 is Ready,
// dev-2.
func testPartitions(t *testing.T, targets []target) {
	first, second := targets[0], targets[1]
	removeBundles(t, "e2e-partitions")
	kubectlApply(t, fixture(t, "partitions.yaml", "DEV2", second.name))
	must(t, devenv.BundleReady(t.Context(), up, ws, "e2e-partitions", 2, 3*time.Minute))

	kubectlApply(t, fixture(t, "partitions.yaml", "DEV2", second.name, "e2e-version: v1", "e2e-version: v2", goodImage, brokenImage))
	b := &fleet.Bundle{}
	must(t, devenv.Poll(t.Context(), 3*time.Minute, func() error {
		if v, _, err := version(t, first.dev); err != nil || v != "v2" {
			return fmt.Errorf("%s runs %q (%v), want the change v2", first.dev, v, err)
		}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "e2e-partitions"}, b); err != nil {
			return err
		}
		st := b.Status
		ready := meta.FindStatusCondition(st.Conditions, fleet.ReadyCondition)
		if ready == nil || ready.ObservedGeneration != b.Generation || !strings.Contains(ready.Message, "rollout held: 1 cluster(s) unavailable, at most 1 allowed") {
			return fmt.Errorf("Bundle Ready condition %+v (generation %d): want the rollout held", ready, b.Generation)
		}
		if st.Unavailable != 1 || st.MaxUnavailable != 1 || len(st.PartitionStatus) != 2 ||
			st.PartitionStatus[0].Name != "first" || st.PartitionStatus[0].Unavailable != 1 || st.PartitionStatus[1].Name != "second" {
			return fmt.Errorf("Bundle status: unavailable %d of %d, partitions %+v", st.Unavailable, st.MaxUnavailable, st.PartitionStatus)
		}
		bd, err := deploymentOf(t, second.name, "e2e-partitions")
		if err != nil {
			return err
		}
		if bd.Spec.StagedDeploymentID == bd.Spec.DeploymentID {
			return fmt.Errorf("%s: the change is not staged on its BundleDeployment", second.name)
		}
		return nil
	}))
	t.Logf("Bundle Ready condition: %s", meta.FindStatusCondition(b.Status.Conditions, fleet.ReadyCondition).Message)
	quiet()
	v, d, err := version(t, second.dev)
	must(t, err)
	if v != "v1" {
		t.Fatalf("%s runs %q while %s cannot start the change: the second partition must keep v1", second.dev, v, first.dev)
	}
	must(t, rolledOut(d))

	kubectlApply(t, fixture(t, "partitions.yaml", "DEV2", second.name, "e2e-version: v1", "e2e-version: v3"))
	must(t, devenv.BundleReady(t.Context(), up, ws, "e2e-partitions", 2, 3*time.Minute))
	for _, tg := range targets {
		must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
			v, d, err := version(t, tg.dev)
			if err != nil {
				return err
			}
			if v != "v3" {
				return fmt.Errorf("%s runs %q after the fix, want v3", tg.dev, v)
			}
			return rolledOut(d)
		}))
	}
}
