package controller_test

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/targeting"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
)

const webChart = `apiVersion: v2
name: web
version: 0.1.0
`

const webTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-settings
data:
  replicas: {{ .Values.replicas | quote }}
`

// webBundle is a Helm chart plus a kustomize overlay, targeted by label.
func webBundle(ws string) *fleet.Bundle {
	return &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "web"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace: "web",
				Helm:             &fleet.HelmOptions{Chart: "chart", Values: &fleet.GenericMap{Data: map[string]any{"replicas": 1}}},
				Kustomize:        &fleet.KustomizeOptions{Dir: "overlay"},
			},
			Resources: []fleet.BundleResource{
				{Name: "chart/Chart.yaml", Content: webChart},
				{Name: "chart/values.yaml", Content: "replicas: 1\n"},
				{Name: "chart/templates/cm.yaml", Content: webTemplate},
				{Name: "overlay/kustomization.yaml", Content: "labels:\n- pairs:\n    team: web\n"},
			},
			Targets: []fleet.BundleTarget{
				{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
					BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]any{"replicas": 3}}}}},
				{Name: "gold", ClusterGroup: "gold"},
			},
		},
	}
}

// newCluster commits an agent-initiated Cluster (see createCluster).
func newCluster(t *testing.T, ws, name string, labels map[string]string) *fleet.Cluster {
	t.Helper()
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name, Labels: labels}, Spec: fleet.ClusterSpec{ClientID: name}}
	createCluster(t, c)
	return c
}

// createCluster commits an agent-initiated Cluster whose agent has made its
// first check-in, as a registered agent does at once: without one the
// controller leaves a new Cluster's status (its namespace) unwritten for
// cluster.FirstCheckInGrace, and every Bundle would wait that long for it.
func createCluster(t *testing.T, c *fleet.Cluster) {
	t.Helper()
	if err := up.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	checkIn := fmt.Appendf(nil, `{"status":{"agent":{"lastSeen":%q}}}`, time.Now().UTC().Format(time.RFC3339))
	if err := up.Status().Patch(t.Context(), c, client.RawPatch(types.MergePatchType, checkIn)); err != nil {
		t.Fatalf("the first check-in of the agent of cluster %s: %v", c.Name, err)
	}
}

// deployedTo returns the clusters that have a BundleDeployment of the bundle.
func deployedTo(t *testing.T, ws, bundle string) []string {
	t.Helper()
	list := &fleet.BundleDeploymentList{}
	if err := up.List(t.Context(), list, client.MatchingLabels{fleet.BundleLabel: bundle, fleet.BundleNamespaceLabel: ws}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, bd := range list.Items {
		if bd.DeletionTimestamp.IsZero() {
			out = append(out, bd.Labels[fleet.ClusterLabel])
		}
	}
	sort.Strings(out)
	return out
}

func waitDeployedTo(t *testing.T, ws, bundle string, want ...string) {
	t.Helper()
	sort.Strings(want)
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("bundle %s deployed to exactly %v", bundle, want), func() error {
		if got := deployedTo(t, ws, bundle); strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("deployed to %v", got)
		}
		return nil
	})
}

// content returns the rendered manifests a cluster's BundleDeployment points at.
func content(t *testing.T, ws, cluster, bundle string) string {
	t.Helper()
	ns := names.ClusterNamespace(ws, cluster)
	bd := &fleet.BundleDeployment{}
	var manifests []byte
	testenv.Eventually(t, 30*time.Second, "content of "+ns+"/"+bundle, func() error {
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: bundle}, bd); err != nil {
			return err
		}
		s := &corev1.Secret{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: bundlecontent.SecretName(bundle)}, s); err != nil {
			return err
		}
		var err error
		manifests, err = bundlecontent.Decode(s, bundlecontent.SplitDeploymentID(bd.Spec.DeploymentID))
		return err
	})
	return string(manifests)
}

func TestBundle_TargetsSelectedClustersAndFollowsLabelChanges(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-bundles-")
	newCluster(t, ws, "prod-1", map[string]string{"env": "prod"})
	newCluster(t, ws, "dev-1", map[string]string{"env": "dev"})
	gold := newCluster(t, ws, "gold-1", map[string]string{"env": "dev", "tier": "gold"})
	if err := up.Create(t.Context(), &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "gold"},
		Spec: fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := up.Create(t.Context(), webBundle(ws)); err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, ws, "web", "prod-1", "gold-1")

	prod := content(t, ws, "prod-1", "web")
	for _, want := range []string{"name: web-settings", `replicas: "3"`, "team: web"} {
		if !strings.Contains(prod, want) {
			t.Errorf("prod content lacks %q (target values, release name, overlay):\n%s", want, prod)
		}
	}
	if g := content(t, ws, "gold-1", "web"); !strings.Contains(g, `replicas: "1"`) {
		t.Errorf("gold content must use the bundle's values:\n%s", g)
	}
	bd := &fleet.BundleDeployment{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: names.ClusterNamespace(ws, "prod-1"), Name: "web"}, bd); err != nil {
		t.Fatal(err)
	}
	if bd.Spec.Options.DefaultNamespace != "web" || !strings.HasPrefix(bd.Spec.DeploymentID, "s-") {
		t.Errorf("BundleDeployment spec: %+v", bd.Spec)
	}
	// The controller writes the BundleDeployment and its content under its
	// own field manager.
	secret := &corev1.Secret{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: bd.Namespace, Name: bundlecontent.SecretName("web")}, secret); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{bd, secret} {
		for _, m := range o.GetManagedFields() {
			if m.Manager != reconciler.FieldManager {
				t.Errorf("%T %s: fields managed by %q (%s), want only %q", o, o.GetName(), m.Manager, m.Operation, reconciler.FieldManager)
			}
		}
	}

	// Labels change: dev-1 joins prod, gold-1 leaves the group.
	updateCluster(t, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "dev-1"}}, func(c *fleet.Cluster) { c.Labels["env"] = "prod" })
	updateCluster(t, gold, func(c *fleet.Cluster) { delete(c.Labels, "tier") })
	waitDeployedTo(t, ws, "web", "prod-1", "dev-1")

	// The bundle reports every cluster waiting for its agent to apply.
	testenv.Eventually(t, 30*time.Second, "bundle status", func() error {
		b := &fleet.Bundle{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "web"}, b); err != nil {
			return err
		}
		r := meta.FindStatusCondition(b.Status.Conditions, fleet.ReadyCondition)
		if b.Status.Display.ReadyClusters != "0/2" || b.Status.Summary.WaitApplied != 2 || r == nil || !strings.Contains(r.Message, "WaitApplied(2)") {
			return fmt.Errorf("status %+v", b.Status)
		}
		// Waiting on the agents: Reconciling, not Stalled (kstatus).
		if c := meta.FindStatusCondition(b.Status.Conditions, fleet.ReconcilingCondition); c == nil || c.Status != metav1.ConditionTrue ||
			c.Reason != fleet.BundleDeploymentsNotReadyReason || meta.FindStatusCondition(b.Status.Conditions, fleet.StalledCondition) != nil {
			return fmt.Errorf("conditions %+v", b.Status.Conditions)
		}
		return nil
	})
	// prod-1's agent never checked in here, so its own agent Bundle
	// (manageagent) waits for the agent to say where it runs.
	testenv.Eventually(t, 30*time.Second, "cluster BUNDLES-READY", func() error {
		c := &fleet.Cluster{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "prod-1"}, c); err != nil {
			return err
		}
		if c.Status.Display.ReadyBundles != "0/1" {
			return fmt.Errorf("readyBundles %q", c.Status.Display.ReadyBundles)
		}
		return nil
	})

	// Deleting the bundle removes its deployments and their content.
	if err := up.Delete(t.Context(), webBundle(ws)); err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, ws, "web")
	testenv.Eventually(t, 30*time.Second, "content garbage-collected", func() error {
		err := up.Get(t.Context(), client.ObjectKey{Namespace: names.ClusterNamespace(ws, "prod-1"), Name: "web"}, &corev1.Secret{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("content Secret still there: %v", err)
	})
}

func TestBundle_PausedStagesChangesWithoutDeploying(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-paused-")
	newCluster(t, ws, "prod-1", map[string]string{"env": "prod"})
	b := webBundle(ws)
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, ws, "web", "prod-1")
	before := content(t, ws, "prod-1", "web")
	key := client.ObjectKey{Namespace: names.ClusterNamespace(ws, "prod-1"), Name: "web"}
	bd := &fleet.BundleDeployment{}
	if err := up.Get(t.Context(), key, bd); err != nil {
		t.Fatal(err)
	}
	deployed := bd.Spec.DeploymentID

	updateBundle(t, b, func(b *fleet.Bundle) {
		b.Spec.Paused = true
		b.Spec.Helm.Values.Data["replicas"] = 7
		b.Spec.Targets[0].Helm = nil
	})
	testenv.Eventually(t, 30*time.Second, "change staged", func() error {
		if err := up.Get(t.Context(), key, bd); err != nil {
			return err
		}
		if !bd.Spec.Paused || bd.Spec.StagedDeploymentID == deployed || bd.Spec.DeploymentID != deployed {
			return fmt.Errorf("spec %+v", bd.Spec)
		}
		return nil
	})
	if after := content(t, ws, "prod-1", "web"); after != before {
		t.Error("a paused bundle changed the content in force")
	}
	updateBundle(t, b, func(b *fleet.Bundle) { b.Spec.Paused = false })
	testenv.Eventually(t, 30*time.Second, "unpaused change deployed", func() error {
		if !strings.Contains(content(t, ws, "prod-1", "web"), `replicas: "7"`) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}

func TestBundle_InvalidTargetIsStalled(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-badtarget-")
	newCluster(t, ws, "c", map[string]string{"env": "prod"})
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "bad"}, Spec: fleet.BundleSpec{
		Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"}},
		Targets: []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "env", Operator: "Like", Values: []string{"p"}}}}}},
	}}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "Stalled TargetsInvalid", func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		s := meta.FindStatusCondition(b.Status.Conditions, fleet.StalledCondition)
		if s == nil || s.Reason != fleet.TargetsInvalidReason || !strings.Contains(s.Message, "spec.targets[0]") {
			return fmt.Errorf("conditions %+v", b.Status.Conditions)
		}
		return nil
	})
	_ = agentvalues.TokenPlaceholder
}

// readTestdata reads one object of internal/targeting/testdata/mixed-target,
// moved into workspace ws.
func readTestdata[T client.Object](t *testing.T, file, ws string, obj T) T {
	t.Helper()
	data, err := os.ReadFile("../internal/targeting/testdata/mixed-target/" + file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatal(err)
	}
	obj.SetNamespace(ws)
	return obj
}

// TestBundle_MixedTargetDeploysWhatFleetRenderBundleShows: the running
// controller deploys the Bundle of internal/targeting/testdata/mixed-target
// (first target: a cluster selector and a ClusterGroup) to exactly the
// clusters, with exactly the options and manifests, that `fleet render
// bundle` shows for them (cmd/fleet checks the CLI prints
// renderer.RenderBundle): prod-eu, inside the group, by the first target;
// prod-us, outside it, by the second; dev-eu, in the group but not selected
// by the first target's selector, not at all.
func TestBundle_MixedTargetDeploysWhatFleetRenderBundleShows(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-mixed-")
	eu := readTestdata(t, "groups.yaml", ws, &fleet.ClusterGroup{}) // the file's first document
	if err := up.Create(t.Context(), eu); err != nil {
		t.Fatal(err)
	}
	clusters := map[string]*fleet.Cluster{}
	for _, name := range []string{"prod-eu", "prod-us", "dev-eu"} {
		c := readTestdata(t, name+".yaml", ws, &fleet.Cluster{})
		createCluster(t, c)
		clusters[name] = c
	}
	b := readTestdata(t, "bundle.yaml", ws, &fleet.Bundle{})
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, ws, b.Name, "prod-eu", "prod-us")

	groups := []fleet.ClusterGroup{*eu}
	for _, name := range []string{"prod-eu", "prod-us"} {
		c := clusters[name]
		review, err := renderer.RenderBundle(b, c, groups)
		if err != nil {
			t.Fatal(err)
		}
		if got := content(t, ws, name, b.Name); got != string(review.YAML) {
			t.Errorf("%s: the controller deployed\n%s\nfleet render bundle shows\n%s", name, got, review.YAML)
		}
		opts, _, err := renderer.OptionsFor(b, c, targeting.Groups{Items: groups, Given: true})
		if err != nil {
			t.Fatal(err)
		}
		bd := &fleet.BundleDeployment{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: names.ClusterNamespace(ws, name), Name: b.Name}, bd); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(opts, bd.Spec.Options); diff != "" {
			t.Errorf("%s: BundleDeployment options differ from fleet render bundle's (-render +controller):\n%s", name, diff)
		}
	}
	if !strings.Contains(content(t, ws, "prod-eu", b.Name), `replicas: "3"`) || !strings.Contains(content(t, ws, "prod-us", b.Name), `replicas: "1"`) {
		t.Error("prod-eu must get the eu-prod target's three replicas, prod-us the chart's one")
	}
	if _, err := renderer.RenderBundle(b, clusters["dev-eu"], groups); !errors.As(err, new(*renderer.NotDeployedError)) {
		t.Errorf("fleet render bundle must show nothing for dev-eu, as the controller deploys nothing there: %v", err)
	}
}

// TestBundle_AgentBundleLabelOnlyFromTheControllersAgentBundle: the
// BundleDeployment of a Cluster's agent Bundle carries
// fleet.AgentBundleLabel, by which the agent's deployer knows its own Bundle;
// a user's Bundle that claims the label, even with a forged controller
// reference to the Cluster, does not pass it on (and gets a Warning event).
// An agent Bundle written without the label (by an older controller) gets it.
func TestBundle_AgentBundleLabelOnlyFromTheControllersAgentBundle(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-agentlabel-")
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "c1"}, Spec: fleet.ClusterSpec{ClientID: "c1", AgentNamespace: "cattle-fleet-system"}}
	createCluster(t, c)
	clusterNS := names.ClusterNamespace(ws, c.Name)
	agentBD := client.ObjectKey{Namespace: clusterNS, Name: names.AgentBundle(c.Name)}
	labelOf := func(key client.ObjectKey) func() (string, error) {
		return func() (string, error) {
			bd := &fleet.BundleDeployment{}
			if err := up.Get(t.Context(), key, bd); err != nil {
				return "", err
			}
			v, ok := bd.Labels[fleet.AgentBundleLabel]
			if !ok {
				return "(none)", nil
			}
			return v, nil
		}
	}
	waitLabel := func(what string, get func() (string, error), want string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, what, func() error {
			got, err := get()
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("label %s = %q, want %q", fleet.AgentBundleLabel, got, want)
			}
			return nil
		})
	}
	waitLabel("the agent Bundle's BundleDeployment labelled", labelOf(agentBD), "true")

	if err := up.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	imposter := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "imposter", Labels: map[string]string{fleet.AgentBundleLabel: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: fleet.GroupVersion.String(), Kind: "Cluster", Name: c.Name, UID: c.UID, Controller: ptr.To(true)}}},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: "cattle-fleet-system"},
			Resources:               []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"}},
			Targets:                 []fleet.BundleTarget{{ClusterName: c.Name}},
		},
	}
	if err := up.Create(t.Context(), imposter); err != nil {
		t.Fatal(err)
	}
	waitLabel("the user Bundle's BundleDeployment written without the label", labelOf(client.ObjectKey{Namespace: clusterNS, Name: imposter.Name}), "(none)")
	testenv.Eventually(t, 30*time.Second, "a ReservedLabelIgnored event on the user Bundle", func() error {
		list := &corev1.EventList{}
		if err := up.List(t.Context(), list, client.InNamespace(ws)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == "ReservedLabelIgnored" && e.InvolvedObject.Name == imposter.Name && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return errors.New("no event")
	})

	// An agent Bundle without the label, as an older controller wrote it:
	// the Cluster reconciler labels it, and the label reaches its
	// BundleDeployment.
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: agentBD.Name}}
	updateBundle(t, b, func(b *fleet.Bundle) { delete(b.Labels, fleet.AgentBundleLabel) })
	updateCluster(t, c, func(c *fleet.Cluster) {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations["example.com/touched"] = "1"
	})
	waitLabel("the agent Bundle labelled again", func() (string, error) {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return "", err
		}
		return b.Labels[fleet.AgentBundleLabel], nil
	}, "true")
	waitLabel("its BundleDeployment labelled again", labelOf(agentBD), "true")
}

// A Bundle change is not reported Ready before the agents apply it: the
// first status the controller writes for the new generation counts the
// BundleDeployments it has just changed as waiting, not as they were.
// (kubectl wait --for=condition=Ready on a Bundle right after a change must
// wait for the change.)
func TestBundle_ChangeIsNotReadyUntilItsAgentsApplyIt(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-change-")
	newCluster(t, ws, "c1", map[string]string{"env": "prod"})
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}, Spec: fleet.BundleSpec{
		BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: "app"},
		Resources:               []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {v: \"1\"}\n"}},
		Targets:                 []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
	}}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: names.ClusterNamespace(ws, "c1"), Name: "app"}
	// applied reports the BundleDeployment's current deployment applied and
	// Ready, as its agent does.
	applied := func() {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, "BundleDeployment reported applied", func() error {
			bd := &fleet.BundleDeployment{}
			if err := up.Get(t.Context(), key, bd); err != nil {
				return err
			}
			bd.Status.AppliedDeploymentID, bd.Status.Ready, bd.Status.NonModified = bd.Spec.DeploymentID, true, true
			return up.Status().Update(t.Context(), bd)
		})
	}
	readyAt := func(generation int64) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("Bundle Ready at generation %d", generation), func() error {
			if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
				return err
			}
			if b.Status.ObservedGeneration != generation || !meta.IsStatusConditionTrue(b.Status.Conditions, fleet.ReadyCondition) {
				return fmt.Errorf("observed generation %d, summary %+v", b.Status.ObservedGeneration, b.Status.Summary)
			}
			return nil
		})
	}
	applied()
	readyAt(1)

	w, err := watchClient(t).Watch(t.Context(), &fleet.BundleList{ListMeta: metav1.ListMeta{ResourceVersion: b.ResourceVersion}},
		client.InNamespace(ws), client.MatchingFields{"metadata.name": b.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	updateBundle(t, b, func(b *fleet.Bundle) {
		b.Spec.Resources[0].Content = strings.Replace(b.Spec.Resources[0].Content, `"1"`, `"2"`, 1)
	})
	generation := b.Generation
	// Every status the controller writes for the new generation, until it
	// reports the change waiting for its agent, must not say Ready.
	timeout := time.After(30 * time.Second)
	for waiting := false; !waiting; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			got, ok := ev.Object.(*fleet.Bundle)
			if !ok || got.Status.ObservedGeneration != generation {
				continue
			}
			if meta.IsStatusConditionTrue(got.Status.Conditions, fleet.ReadyCondition) || got.Status.Summary.Ready != 0 {
				t.Fatalf("the Bundle reported its change Ready before the agent applied it: summary %+v, conditions %+v", got.Status.Summary, got.Status.Conditions)
			}
			waiting = got.Status.Summary.WaitApplied == 1
		case <-timeout:
			t.Fatal("the Bundle never reported its change waiting for the agent")
		}
	}
	applied()
	readyAt(generation)
}

// updateBundle changes a Bundle, retrying when the controller wrote it in
// between.
func updateBundle(t *testing.T, b *fleet.Bundle, mutate func(*fleet.Bundle)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		mutate(b)
		return up.Update(t.Context(), b)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// watchClient is an upstream client that can watch.
func watchClient(t *testing.T) client.WithWatch {
	t.Helper()
	wc, err := client.NewWithWatch(env.Upstream.Config, client.Options{Scheme: up.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return wc
}
