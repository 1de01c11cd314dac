package controller_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/valuessecret"
	"github.com/gitops-fleet/fleet/renderer"
)

// valuesBundle is a Bundle as Fleet's `fleet apply` writes one (ignore: {},
// correctDrift: {}, a target per group), whose chart prints the values it
// gets; helm is the spec.helm block.
func valuesBundle(t *testing.T, ws, name, helm string) *fleet.Bundle {
	t.Helper()
	doc := fmt.Sprintf(`apiVersion: fleet.cattle.io/v1alpha1
kind: Bundle
metadata:
  name: %s
  namespace: %s
spec:
  defaultNamespace: values
  ignore: {}
  correctDrift: {}
  helm:
%s
  resources:
  - name: chart/Chart.yaml
    content: |
      apiVersion: v2
      name: show
      version: 0.1.0
  - name: chart/templates/show.yaml
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: show
      data:
        values: {{ toJson .Values | quote }}
  targets:
  - clusterSelector: {}
    ignore: {}
`, name, ws, indent(helm, "    "))
	b := &fleet.Bundle{}
	if err := yaml.UnmarshalStrict([]byte(doc), b); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return b
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n")
}

// shownValues returns the values the chart got on a cluster.
func shownValues(t *testing.T, ws, cluster, bundle string) map[string]any {
	t.Helper()
	var doc struct {
		Data struct {
			Values string `json:"values"`
		} `json:"data"`
	}
	if err := yaml.Unmarshal([]byte(content(t, ws, cluster, bundle)), &doc); err != nil {
		t.Fatal(err)
	}
	v := map[string]any{}
	if err := json.Unmarshal([]byte(doc.Data.Values), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// waitStalled waits for the Bundle to be Stalled with reason, its message
// saying each of says.
func waitStalled(t *testing.T, b *fleet.Bundle, reason string, says ...string) string {
	t.Helper()
	return waitBundleCondition(t, b, fleet.StalledCondition, metav1.ConditionTrue, reason, says...)
}

// waitBundleCondition waits for the Bundle's condition cond to have status
// and reason, its message saying each of says.
func waitBundleCondition(t *testing.T, b *fleet.Bundle, cond string, status metav1.ConditionStatus, reason string, says ...string) string {
	t.Helper()
	var msg string
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%s=%s %s", cond, status, reason), func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		s := meta.FindStatusCondition(b.Status.Conditions, cond)
		if s == nil || s.Status != status || s.Reason != reason {
			return fmt.Errorf("conditions %+v", b.Status.Conditions)
		}
		for _, w := range says {
			if !strings.Contains(s.Message, w) {
				return fmt.Errorf("message %q does not say %q", s.Message, w)
			}
		}
		msg = s.Message
		return nil
	})
	return msg
}

// waitNamespaces waits until the clusters have their namespace, so a Bundle
// created next sees all of them in its first reconcile.
func waitNamespaces(t *testing.T, ws string, clusters []*fleet.Cluster) {
	t.Helper()
	testenv.Eventually(t, 5*time.Minute, fmt.Sprintf("%d cluster namespaces", len(clusters)), func() error {
		list := &fleet.ClusterList{}
		if err := up.List(t.Context(), list, client.InNamespace(ws)); err != nil {
			return err
		}
		ready := 0
		for _, c := range list.Items {
			if c.Status.Namespace == names.ClusterNamespace(ws, c.Name) {
				ready++
			}
		}
		if ready < len(clusters) {
			return fmt.Errorf("%d of %d", ready, len(clusters))
		}
		return nil
	})
}

// TestBundle_ValuesTemplatedPerClusterShareRenders: `${ }` values,
// templateValues and global.fleet.clusterLabels values are rendered per
// cluster, exactly as `fleet render bundle --cluster` shows them; clusters
// that look alike to the templates share one render (the count is logged:
// FLEET_VALUES_CLUSTERS=1000 measures it on 1,000 clusters); a change of
// what the templates read of a Cluster (a label, spec.templateValues)
// renders it again.
func TestBundle_ValuesTemplatedPerClusterShareRenders(t *testing.T) {
	n := 30
	if v, err := strconv.Atoi(os.Getenv("FLEET_VALUES_CLUSTERS")); err == nil && v > 0 {
		n = v
	}
	ws := testenv.Namespace(t, up, "fleet-values-")
	tiers := []string{"gold", "silver", "bronze"}
	var clusters []*fleet.Cluster
	start := time.Now()
	for i := range n {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: fmt.Sprintf("c-%04d", i),
			Labels:      map[string]string{"tier": tiers[i%3], "id": strconv.Itoa(i)},
			Annotations: map[string]string{"serial": strconv.Itoa(i)}}, Spec: fleet.ClusterSpec{ClientID: fmt.Sprintf("c-%04d", i)}}
		createCluster(t, c)
		clusters = append(clusters, c)
	}
	waitNamespaces(t, ws, clusters)
	t.Logf("%d clusters with their namespaces after %s", n, time.Since(start).Round(time.Second))

	b := valuesBundle(t, ws, "tiered", `chart: chart
values:
  tier: ${ .ClusterLabels.tier }
  legacy: global.fleet.clusterLabels.tier
  replicas: ${ get .ClusterValues "replicas" | default 1 }
  literal: "{{ .Values.kept }}"
templateValues:
  upper: ${ .ClusterLabels.tier | upper }`)
	rendersBefore := metricSum(t, "fleet_bundle_renders_total", nil)
	start = time.Now()
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	took := testenv.Eventually(t, 30*time.Second+time.Duration(n)*200*time.Millisecond, fmt.Sprintf("bundle deployed to the %d clusters", n), func() error {
		if got := deployedTo(t, ws, b.Name); len(got) != n {
			return fmt.Errorf("deployed to %d", len(got))
		}
		return nil
	})
	t.Logf("BundleDeployments for the %d clusters after %s", n, took.Round(time.Millisecond))
	for i, c := range clusters {
		if i >= 6 && i%97 != 0 { // every cluster of a small run, a sample of a large one
			continue
		}
		got := shownValues(t, ws, c.Name, b.Name)
		want := map[string]any{"tier": tiers[i%3], "legacy": tiers[i%3], "replicas": float64(1), "literal": "{{ .Values.kept }}", "upper": strings.ToUpper(tiers[i%3])}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s got values %v, want %v", c.Name, got, want)
		}
		if i < 3 {
			review, err := renderer.RenderBundle(b, c, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := content(t, ws, c.Name, b.Name); got != string(review.YAML) {
				t.Errorf("%s: the controller deployed\n%s\nfleet render bundle shows\n%s", c.Name, got, review.YAML)
			}
		}
	}
	renders := metricSum(t, "fleet_bundle_renders_total", nil) - rendersBefore
	t.Logf("%d clusters, a template reading one label with 3 values: %.0f renders, deployed everywhere after %s", n, renders, time.Since(start).Round(time.Millisecond))
	// Once per distinct context, give or take a re-render of the content
	// of clusters whose Secret the metadata cache had not seen yet; once
	// per cluster would be n.
	if renders > float64(n)/3 {
		t.Errorf("%.0f renders for %d clusters whose templates see 3 different clusters", renders, n)
	}

	// What the templates read changes: the cluster renders again.
	c0 := clusters[0]
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(c0), c0); err != nil {
			return err
		}
		c0.Labels["tier"] = "platinum"
		c0.Spec.TemplateValues = &fleet.GenericMap{Data: map[string]any{"replicas": 5}}
		return up.Update(t.Context(), c0)
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, c0.Name+" rendered with its new label and templateValues", func() error {
		got := shownValues(t, ws, c0.Name, b.Name)
		if got["tier"] != "platinum" || got["replicas"] != float64(5) {
			return fmt.Errorf("values %v", got)
		}
		return nil
	})
}

// TestBundle_ValuesTemplateErrorStallsNamingClusterAndValue: a template
// that fails for one cluster (a label it lacks) stalls the Bundle with
// ValuesTemplateFailed, naming the cluster and the value; the clusters it
// renders for are deployed.
func TestBundle_ValuesTemplateErrorStallsNamingClusterAndValue(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-values-err-")
	ok := newCluster(t, ws, "zoned", map[string]string{"zone": "a"})
	bad := newCluster(t, ws, "unzoned", map[string]string{"other": "x"})
	waitNamespaces(t, ws, []*fleet.Cluster{ok, bad})
	b := valuesBundle(t, ws, "zones", "chart: chart\nvalues:\n  server:\n    zone: ${ .ClusterLabels.zone }")
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	msg := waitStalled(t, b, fleet.ValuesTemplateFailedReason, "cluster unzoned", "bundle zones", "helm.values.server.zone", `no entry for key "zone"`)
	t.Logf("message: %s", msg)
	waitDeployedTo(t, ws, b.Name, "zoned")
}

// TestBundle_ValuesFromReadUpstreamInTheBundlesNamespaceOnly: valuesFrom
// ConfigMaps and Secrets of the Bundle's workspace are read by the
// controller (as its chart's identity) and merged as Fleet merges them; a
// Secret's content lands in the content Secret only, never in the Bundle,
// the BundleDeployment, a status, an event or the log; a change of the Secret
// renders again. A reference to another namespace (another workspace) is
// refused with ValuesFromNotAllowed, and nothing of it is read; a missing
// Secret waits with ValuesFromInvalid until it exists.
func TestBundle_ValuesFromReadUpstreamInTheBundlesNamespaceOnly(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-valuesfrom-")
	other := testenv.Namespace(t, up, "fleet-valuesfrom-other-")
	secretValue := fmt.Sprintf("hunter2-%d", time.Now().UnixNano())
	stolenValue := secretValue + "-other-workspace"
	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "settings"}, Data: map[string]string{"custom.yaml": "color: blue\npassword: from-configmap\n"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "db"}, Data: map[string][]byte{"values.yaml": []byte("password: " + secretValue + "\n")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "db"}, Data: map[string][]byte{"values.yaml": []byte("password: " + stolenValue + "\n")}},
	} {
		if err := up.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	c := newCluster(t, ws, "one", nil)
	waitNamespaces(t, ws, []*fleet.Cluster{c})

	b := valuesBundle(t, ws, "db", `chart: chart
values:
  color: red
  password: from-values
valuesFrom:
- configMapKeyRef:
    name: settings
    key: custom.yaml
- secretKeyRef:
    name: db`)
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, ws, b.Name, "one")
	if got := shownValues(t, ws, "one", b.Name); got["color"] != "blue" || got["password"] != secretValue {
		t.Errorf("values %v: want the ConfigMap's color over values, the Secret's password over both", got)
	}

	// A change of the Secret renders again (it is watched).
	newValue := secretValue + "-rotated"
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &corev1.Secret{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "db"}, s); err != nil {
			return err
		}
		s.Data["values.yaml"] = []byte("password: " + newValue + "\n")
		return up.Update(t.Context(), s)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitShownPassword(t, ws, b.Name, newValue)

	// Another workspace's Secret: refused, never read.
	steal := valuesBundle(t, ws, "steal", fmt.Sprintf("chart: chart\nvaluesFrom:\n- secretKeyRef:\n    name: db\n    namespace: %s", other))
	if err := up.Create(t.Context(), steal); err != nil {
		t.Fatal(err)
	}
	waitStalled(t, steal, fleet.ValuesFromNotAllowedReason, "Secret "+other+"/db", "only from the Bundle's own namespace "+ws)
	testenv.Consistently(t, 3*time.Second, "no BundleDeployment for the Bundle reading another workspace", func() error {
		if got := deployedTo(t, ws, steal.Name); len(got) > 0 {
			return fmt.Errorf("deployed to %v", got)
		}
		return nil
	})

	// A Secret that does not exist yet: the Bundle says so, and deploys
	// once it is there.
	later := valuesBundle(t, ws, "later", "chart: chart\nvaluesFrom:\n- secretKeyRef:\n    name: later\n    key: v.yaml")
	if err := up.Create(t.Context(), later); err != nil {
		t.Fatal(err)
	}
	waitStalled(t, later, fleet.ValuesFromInvalidReason, "Secret "+ws+"/later does not exist")
	if err := up.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "later"}, Data: map[string][]byte{"v.yaml": []byte("late: true\n")}}); err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, ws, later.Name, "one")

	// The Secrets' content is in the content Secret only.
	if !strings.Contains(logs.String(), `"name"="steal"`) {
		t.Fatal("the controller's log does not show its reconciles of Bundle steal: is it captured?")
	}
	checkNotLeaked(t, ws, "one", secretValue, newValue, stolenValue)
}

// TestBundle_ValuesHashReadsFleetsValuesSecret: a Bundle as Fleet's fleet
// apply writes it to a cluster (its Helm values moved into the Secret named
// like it, spec.valuesHash their hash) waits for that Secret, then deploys
// with its values: the Bundle's and a named target's. The values reach the
// content Secret only, never a Bundle, BundleDeployment, event or the log.
// A Secret written ahead of its Bundle (fleet apply's order) is waited for
// while the deployment in force stays; a Secret of another type, named like
// the Bundle, is not read.
func TestBundle_ValuesHashReadsFleetsValuesSecret(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-valueshash-")
	c := newCluster(t, ws, "one", nil)
	waitNamespaces(t, ws, []*fleet.Cluster{c})
	secretValue := fmt.Sprintf("hunter2-%d", time.Now().UnixNano())
	rotated := secretValue + "-rotated"
	data := func(password string) map[string][]byte {
		return map[string][]byte{
			"values.yaml": []byte(`{"color":"red","password":"` + password + `"}`),
			"all":         []byte(`{"color":"green"}`),
		}
	}

	b := valuesBundle(t, ws, "fleetvals", "chart: chart")
	b.Spec.Targets[0].Name = "all"
	b.Spec.ValuesHash = valuessecret.Hash(data(secretValue))
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	waitBundleCondition(t, b, fleet.ReadyCondition, metav1.ConditionFalse, fleet.WaitingForValuesReason, "Secret "+ws+"/fleetvals", "does not exist")
	testenv.Consistently(t, 2*time.Second, "nothing deployed without the values", func() error {
		if got := deployedTo(t, ws, b.Name); len(got) > 0 {
			return fmt.Errorf("deployed to %v", got)
		}
		return nil
	})

	values := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: b.Name}, Type: valuessecret.Type, Data: data(secretValue)}
	if err := up.Create(t.Context(), values); err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, ws, b.Name, "one")
	if got := shownValues(t, ws, "one", b.Name); got["color"] != "green" || got["password"] != secretValue {
		t.Errorf("values %v: want the target's color over the Bundle's, the Bundle's password", got)
	}
	bd := &fleet.BundleDeployment{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: names.ClusterNamespace(ws, "one"), Name: b.Name}, bd); err != nil {
		t.Fatal(err)
	}
	if h := bd.Spec.Options.Helm; h == nil || h.Chart != "chart" || h.Values != nil {
		t.Errorf("BundleDeployment options.helm %+v: want the chart and no values", h)
	}

	// fleet apply writes the Secret first: until the Bundle names the new
	// values, it waits and the deployment in force stays.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(values), values); err != nil {
			return err
		}
		values.Data = data(rotated)
		return up.Update(t.Context(), values)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitBundleCondition(t, b, fleet.ReadyCondition, metav1.ConditionFalse, fleet.WaitingForValuesReason, "holds other values than the Bundle names")
	if got := shownValues(t, ws, "one", b.Name); got["password"] != secretValue {
		t.Errorf("password %v while the Bundle waits: want the deployment in force (%s)", got["password"], secretValue)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Spec.ValuesHash = valuessecret.Hash(data(rotated))
		return up.Update(t.Context(), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitShownPassword(t, ws, b.Name, rotated)

	// A Secret of another kind that happens to have the Bundle's name.
	other := valuesBundle(t, ws, "typed", "chart: chart")
	other.Spec.ValuesHash = valuessecret.Hash(map[string][]byte{"values.yaml": []byte(`{"a":1}`)})
	if err := up.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: other.Name}, Type: "example.com/credentials",
		Data: map[string][]byte{"values.yaml": []byte(`{"a":1}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := up.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	waitStalled(t, other, fleet.ValuesSecretInvalidReason, "Secret "+ws+"/typed", "example.com/credentials")

	// The values are in the content Secret only.
	checkNotLeaked(t, ws, "one", secretValue, rotated)
}

// waitShownPassword waits until the Bundle's chart on cluster one shows
// password.
func waitShownPassword(t *testing.T, ws, bundle, password string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "password "+password+" deployed", func() error {
		if got := shownValues(t, ws, "one", bundle); got["password"] != password {
			return fmt.Errorf("password %v", got["password"])
		}
		return nil
	})
}

// checkNotLeaked fails the test when one of values is in a Bundle,
// BundleDeployment or event of the workspace or the cluster's namespace, or
// in the controller's log.
func checkNotLeaked(t *testing.T, ws, cluster string, values ...string) {
	t.Helper()
	var seen []string
	for _, obj := range []client.ObjectList{&fleet.BundleList{}, &fleet.BundleDeploymentList{}, &corev1.EventList{}} {
		for _, ns := range []string{ws, names.ClusterNamespace(ws, cluster)} {
			if err := up.List(t.Context(), obj, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			data, _ := json.Marshal(obj)
			seen = append(seen, string(data))
		}
	}
	seen = append(seen, logs.String())
	for _, s := range seen {
		for _, v := range values {
			if strings.Contains(s, v) {
				t.Errorf("a Secret's value %s is in a Bundle, BundleDeployment, event or the controller's log", v)
			}
		}
	}
}
