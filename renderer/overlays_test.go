package renderer_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/renderer"
)

// overlayBundle is a plain-manifest Bundle as fleet apply writes it (empty
// ignore and correctDrift, the files of the directory including overlays/),
// with a target per cluster label choosing overlays.
func overlayBundle(mode fleet.TargetCustomizationMode) *fleet.Bundle {
	return &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Name: "manifests", Namespace: "fleet-default"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace: "shop",
				IgnoreOptions:    &fleet.IgnoreOptions{},
				CorrectDrift:     &fleet.CorrectDrift{},
			},
			TargetCustomizationMode: mode,
			Resources: []fleet.BundleResource{
				{Name: "deployment.yaml", Content: `apiVersion: apps/v1
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
        image: nginx:1.27
        env:
        - {name: MODE, value: base}
      - name: sidecar
        image: busybox:1.36
`},
				{Name: "config/settings.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: red\n  size: s\n"},
				{Name: "widget.yaml", Content: "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  items: [a, b]\n  size: 1\n"},
				// prod: a strategic merge patch (the container list merges by
				// name), a replacement, and a new file.
				{Name: "overlays/prod/deployment_patch.yaml", Content: "spec:\n  replicas: 3\n  template:\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.28\n"},
				{Name: "overlays/prod/config/settings.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: green\n"},
				{Name: "overlays/prod/extra.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n"},
				// eu: a JSON merge patch of a custom resource (lists are
				// replaced), then a JSON patch (RFC 6902), applied after prod.
				{Name: "overlays/eu/widget_patch.yaml", Content: "spec:\n  items: [c]\n"},
				{Name: "overlays/eu/config/settings_patch.yaml", Content: "- {op: add, path: /data/region, value: eu}\n"},
			},
			Targets: []fleet.BundleTarget{
				{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}, BundleDeploymentOptions: fleet.BundleDeploymentOptions{YAML: &fleet.YAMLOptions{Overlays: []string{"prod"}}, IgnoreOptions: &fleet.IgnoreOptions{}}},
				{Name: "eu", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}, BundleDeploymentOptions: fleet.BundleDeploymentOptions{YAML: &fleet.YAMLOptions{Overlays: []string{"eu"}}, IgnoreOptions: &fleet.IgnoreOptions{}}},
				{Name: "all", ClusterSelector: &metav1.LabelSelector{}},
			},
		},
	}
}

func objectsByName(t *testing.T, out *renderer.Output) map[string]*unstructured.Unstructured {
	t.Helper()
	objs, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		m[o.GetKind()+"/"+o.GetName()] = o
	}
	return m
}

func cluster(name string, labels map[string]string) *fleet.Cluster {
	return &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "fleet-default", Labels: labels}}
}

// A cluster without overlays gets the base files, never the files under
// overlays/; one target's overlay replaces, adds and strategic-merge
// patches; with AllMatches a second target's overlay is applied after the
// first (a JSON patch on the replaced file, a merge patch on a custom
// resource).
func TestRenderBundle_YAMLOverlays(t *testing.T) {
	// No overlay: base files only.
	base, err := renderer.RenderBundle(overlayBundle(""), cluster("dev", map[string]string{"env": "dev"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	objs := objectsByName(t, base)
	if len(objs) != 3 || objs["ConfigMap/extra"] != nil {
		t.Fatalf("without overlays want the 3 base objects, got %v", keys(objs))
	}
	if strings.Contains(string(base.YAML), "overlays/") {
		t.Errorf("files under overlays/ must never be manifests:\n%s", base.YAML)
	}

	// prod: replicas 3, web image changed, sidecar kept (strategic merge by
	// name), settings replaced (size gone), extra added.
	prod, err := renderer.RenderBundle(overlayBundle(""), cluster("p1", map[string]string{"env": "prod", "region": "eu"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	objs = objectsByName(t, prod)
	dep := objs["Deployment/web"]
	if r, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas"); r != 3 {
		t.Errorf("replicas %d, want 3", r)
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if len(containers) != 2 || containers[0].(map[string]any)["image"] != "nginx:1.28" || containers[1].(map[string]any)["name"] != "sidecar" {
		t.Errorf("strategic merge must change web's image and keep the sidecar: %v", containers)
	}
	if env := containers[0].(map[string]any)["env"]; env == nil {
		t.Errorf("strategic merge must keep web's env: %v", containers[0])
	}
	settings := objs["ConfigMap/settings"]
	if d, _, _ := unstructured.NestedStringMap(settings.Object, "data"); d["color"] != "green" || d["size"] != "" || d["region"] != "" {
		t.Errorf("FirstMatch: prod's replacement only, got %v", d)
	}
	if objs["ConfigMap/extra"] == nil {
		t.Error("a new file of the overlay must be added")
	}
	if items, _, _ := unstructured.NestedStringSlice(objs["Widget/w"].Object, "spec", "items"); len(items) != 2 {
		t.Errorf("FirstMatch: eu's overlay must not apply, items %v", items)
	}

	// AllMatches: prod then eu.
	all, err := renderer.RenderBundle(overlayBundle(fleet.TargetCustomizationModeAllMatches), cluster("p1", map[string]string{"env": "prod", "region": "eu"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	objs = objectsByName(t, all)
	if d, _, _ := unstructured.NestedStringMap(objs["ConfigMap/settings"].Object, "data"); d["color"] != "green" || d["region"] != "eu" {
		t.Errorf("AllMatches: eu's JSON patch on prod's replacement, got %v", d)
	}
	w := objs["Widget/w"]
	if items, _, _ := unstructured.NestedStringSlice(w.Object, "spec", "items"); len(items) != 1 || items[0] != "c" {
		t.Errorf("merge patch of a custom resource replaces the list: %v", items)
	}
	if s, _, _ := unstructured.NestedInt64(w.Object, "spec", "size"); s != 1 {
		t.Errorf("merge patch keeps other fields: size %d", s)
	}
}

// Overlays that cannot apply say which file and what to fix; nothing
// renders half-patched.
func TestRenderBundle_YAMLOverlayErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		overlays []string
		extra    []fleet.BundleResource
		want     string
	}{
		{"unknown overlay", []string{"staging"}, nil, `yaml.overlays[0] "staging": the Bundle has no files under overlays/staging/`},
		{"overlay name escaping", []string{"../x"}, nil, `yaml.overlays[0] "../x" must be the name of a directory under overlays/`},
		{"patch without its file", []string{"bad"}, []fleet.BundleResource{{Name: "overlays/bad/missing_patch.yaml", Content: "a: b\n"}}, "yaml overlay overlays/bad/missing_patch.yaml patches missing.yaml, which is not in the Bundle"},
		{"patch of a multi-document file", []string{"bad"}, []fleet.BundleResource{
			{Name: "two.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"},
			{Name: "overlays/bad/two_patch.yaml", Content: "data: {x: y}\n"}}, "yaml overlay overlays/bad/two_patch.yaml does not apply to two.yaml: the file has 2 documents"},
		{"JSON patch that does not apply", []string{"bad"}, []fleet.BundleResource{{Name: "overlays/bad/widget_patch.yaml", Content: "- {op: replace, path: /spec/nothing/here, value: 1}\n"}}, "yaml overlay overlays/bad/widget_patch.yaml does not apply to widget.yaml"},
	} {
		b := overlayBundle("")
		b.Spec.Resources = append(b.Spec.Resources, tc.extra...)
		b.Spec.Targets = nil
		b.Spec.YAML = &fleet.YAMLOptions{Overlays: tc.overlays}
		_, err := renderer.RenderBundle(b, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func keys(m map[string]*unstructured.Unstructured) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
