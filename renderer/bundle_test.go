package renderer_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/renderer"
)

const testChart = `apiVersion: v2
name: web
version: 0.1.0
`

const testTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-settings
  namespace: {{ .Release.Namespace }}
data:
  color: {{ .Values.color | quote }}
  size: {{ .Values.size | quote }}
`

func gz(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

func chartBundle() *fleet.Bundle {
	return &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet-default"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace: "web",
				Helm: &fleet.HelmOptions{
					Chart:       "chart",
					ValuesFiles: []string{"values-common.yaml"},
					Values:      &fleet.GenericMap{Data: map[string]any{"size": "m"}},
				},
				Kustomize: &fleet.KustomizeOptions{Dir: "overlay"},
			},
			Resources: []fleet.BundleResource{
				{Name: "chart/Chart.yaml", Content: testChart},
				{Name: "chart/values.yaml", Content: "color: red\nsize: s\n"},
				{Name: "chart/templates/cm.yaml", Content: gz(testTemplate), Encoding: "base64+gz"},
				{Name: "values-common.yaml", Content: "color: blue\n"},
				{Name: "overlay/kustomization.yaml", Content: "commonLabels:\n  team: platform\n"},
			},
			Targets: []fleet.BundleTarget{
				{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
					BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]any{"size": "xl"}}}}},
				{ClusterSelector: &metav1.LabelSelector{}},
			},
		},
	}
}

func TestRenderBundle_ChartValuesTargetAndOverlay(t *testing.T) {
	cases := []struct {
		labels            map[string]string
		wantColor, wantSz string
	}{
		{map[string]string{"env": "prod"}, "blue", "xl"},
		{map[string]string{"env": "dev"}, "blue", "m"},
	}
	for _, tc := range cases {
		cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: tc.labels}}
		out, err := renderer.RenderBundle(chartBundle(), cluster, nil)
		if err != nil {
			t.Fatal(err)
		}
		objs := objects(t, out)
		if len(objs) != 1 {
			t.Fatalf("want 1 object, got %d:\n%s", len(objs), out.YAML)
		}
		cm := objs[0]
		color, _, _ := unstructured.NestedString(cm.Object, "data", "color")
		size, _, _ := unstructured.NestedString(cm.Object, "data", "size")
		if color != tc.wantColor || size != tc.wantSz {
			t.Errorf("%v: color %q size %q, want %q %q (values file over chart defaults, inline over file, target over bundle)", tc.labels, color, size, tc.wantColor, tc.wantSz)
		}
		if cm.GetLabels()["team"] != "platform" || cm.GetName() != "web-settings" || cm.GetNamespace() != "web" {
			t.Errorf("overlay or release naming not applied: %s/%s %v", cm.GetNamespace(), cm.GetName(), cm.GetLabels())
		}
	}
}

// A cluster the Bundle deploys nothing to (no target selects it, or the one
// that does has doNotDeploy) renders nothing: a *NotDeployedError that says
// why, not the Bundle's own options.
func TestRenderBundle_NothingForAClusterItDoesNotDeployTo(t *testing.T) {
	b := chartBundle()
	b.Spec.Targets = b.Spec.Targets[:1] // env=prod only
	dev := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "dev-1", Labels: map[string]string{"env": "dev"}}}
	var nd *renderer.NotDeployedError
	if _, err := renderer.RenderBundle(b, dev, nil); !errors.As(err, &nd) || !strings.Contains(err.Error(), "no target of Bundle web selects cluster dev-1") {
		t.Errorf("untargeted cluster: %v", err)
	}
	b.Spec.Targets[0].DoNotDeploy = true
	b.Spec.Targets[0].Name = "prod"
	prod := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-1", Labels: map[string]string{"env": "prod"}}}
	if _, err := renderer.RenderBundle(b, prod, nil); !errors.As(err, &nd) || !strings.Contains(err.Error(), "target prod of Bundle web selects cluster prod-1 with doNotDeploy") {
		t.Errorf("doNotDeploy: %v", err)
	}
}

func TestRenderBundle_RawManifestsInPathOrder(t *testing.T) {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "raw"}, Spec: fleet.BundleSpec{Resources: []fleet.BundleResource{
		{Name: "b/svc.yaml", Content: "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"},
		{Name: "a/cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: one}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: two}\n"},
		{Name: "README.md", Content: "not a manifest"},
	}}}
	out, err := renderer.RenderBundle(b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objects(t, out) {
		names = append(names, o.GetName())
	}
	if strings.Join(names, ",") != "one,two,s" {
		t.Errorf("got %v", names)
	}
	again, _ := renderer.RenderBundle(b, nil, nil)
	if !bytes.Equal(again.YAML, out.YAML) {
		t.Error("not deterministic")
	}
}

func TestRenderBundle_BadInputGivesClearErrors(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(b *fleet.Bundle)
		want   string
	}{
		{"broken overlay", func(b *fleet.Bundle) {
			b.Spec.Resources[4].Content = "resources: [missing.yaml]\n"
		}, "kustomize overlay"},
		{"overlay with unknown field", func(b *fleet.Bundle) {
			b.Spec.Resources[4].Content = "commonLabelz: {a: b}\n"
		}, "kustomization.yaml is invalid"},
		{"no chart", func(b *fleet.Bundle) { b.Spec.Helm.Chart = "nochart" }, `helm.chart "nochart": the Bundle has no nochart/Chart.yaml`},
		{"escaping path", func(b *fleet.Bundle) { b.Spec.Resources[0].Name = "../etc/passwd" }, "must be a relative path inside the Bundle"},
		{"bad encoding", func(b *fleet.Bundle) { b.Spec.Resources[2].Encoding = "zip" }, `unknown encoding "zip"`},
		{"missing values file", func(b *fleet.Bundle) { b.Spec.Helm.ValuesFiles = []string{"nope.yaml"} }, `helm.valuesFiles: "nope.yaml" is not in the Bundle`},
		{"template error", func(b *fleet.Bundle) {
			b.Spec.Resources[2] = fleet.BundleResource{Name: "chart/templates/cm.yaml", Content: "{{ .Values.color | nosuchfunc }}"}
		}, "nosuchfunc"},
		{"raw yaml broken", func(b *fleet.Bundle) {
			b.Spec.Helm, b.Spec.Kustomize = nil, nil
			b.Spec.Resources = []fleet.BundleResource{{Name: "x.yaml", Content: "kind: [\n"}}
		}, "not valid YAML"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := chartBundle()
			tc.mutate(b)
			_, err := renderer.RenderBundle(b, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestMergeOptions_ServiceAccountOfTargetWins(t *testing.T) {
	cases := []struct {
		name       string
		base, over string
		want       string
	}{
		{"neither", "", "", ""},
		{"bundle only", "deployer", "", "deployer"},
		{"target only", "", "restricted", "restricted"},
		{"target overrides bundle", "deployer", "restricted", "restricted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := fleet.BundleDeploymentOptions{DefaultNamespace: "web", ServiceAccount: c.base}
			over := fleet.BundleDeploymentOptions{ServiceAccount: c.over}
			got := renderer.MergeOptions(base, over)
			if got.ServiceAccount != c.want {
				t.Errorf("serviceAccount = %q, want %q", got.ServiceAccount, c.want)
			}
			if got.DefaultNamespace != "web" || base.ServiceAccount != c.base {
				t.Errorf("merge changed other fields or its input: %+v, base %+v", got, base)
			}
		})
	}
}

// Fleet's kustomize layouts keep a base beside the overlays
// (kustomize.dir: overlays/prod, resources: [../../base]): the base is a
// file of the Bundle, so the build reaches it; nothing outside the Bundle
// exists for it.
func TestRenderBundle_KustomizeDirReachesItsBaseInTheBundle(t *testing.T) {
	bundle := func(overlay string) *fleet.Bundle {
		return &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "kust"}, Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{Kustomize: &fleet.KustomizeOptions{Dir: "overlays/prod"}},
			Resources: []fleet.BundleResource{
				{Name: "fleet.yaml", Content: "kustomize:\n  dir: overlays/prod\n"},
				{Name: "base/kustomization.yaml", Content: "resources: [cm.yaml]\n"},
				{Name: "base/cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n"},
				{Name: "overlays/prod/kustomization.yaml", Content: overlay},
				{Name: "overlays/prod/color.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: red}\n"},
			},
		}}
	}
	out, err := renderer.RenderBundle(bundle("resources: [../../base]\nnamePrefix: prod-\npatches: [{path: color.yaml}]\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, out)
	if len(objs) != 1 || objs[0].GetName() != "prod-settings" {
		t.Fatalf("want the base's ConfigMap with the overlay's prefix, got %s", out.YAML)
	}
	if c, _, _ := unstructured.NestedString(objs[0].Object, "data", "color"); c != "red" {
		t.Errorf("the overlay's patch was not applied: color %q", c)
	}

	_, err = renderer.RenderBundle(bundle("resources: [../../../../etc]\n"), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "kustomize overlay") {
		t.Fatalf("a base outside the Bundle: want a kustomize error, got %v", err)
	}
	if strings.Contains(err.Error(), "/bundle/") {
		t.Errorf("the error shows the renderer's in-memory paths: %v", err)
	}
}

func TestRenderBundle_RemoteOverlayResourceNamesTheBundleFile(t *testing.T) {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "remote"}, Spec: fleet.BundleSpec{
		BundleDeploymentOptions: fleet.BundleDeploymentOptions{Kustomize: &fleet.KustomizeOptions{Dir: "overlay"}},
		Resources: []fleet.BundleResource{
			{Name: "overlay/cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
			{Name: "overlay/kustomization.yaml", Content: "resources:\n- cm.yaml\n- base\n- https://example.com/deploy.yaml\n"},
		},
	}}
	_, err := renderer.RenderBundle(b, nil, nil)
	want := `kustomize overlay: overlay/kustomization.yaml resources[2] "https://example.com/deploy.yaml" is a remote resource; Bundles may only use their own files`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}
