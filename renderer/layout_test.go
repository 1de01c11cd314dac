package renderer_test

import (
	"strings"
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/renderer"
)

// TestRenderFilesAsFleetLaysThemOut: files as Fleet's `fleet apply` puts
// them in a Bundle render as Fleet's agent reads them.
func TestRenderFilesAsFleetLaysThemOut(t *testing.T) {
	cm := func(name string) []byte {
		return []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n")
	}
	cases := []struct {
		name  string
		files map[string][]byte
		opts  fleet.BundleDeploymentOptions
		want  []string // ConfigMap names rendered, in order
	}{
		{"plain manifests: fleet.yaml, README, overlays/ and sub-bundles left out", map[string][]byte{
			"fleet.yaml": []byte("namespace: x\n"), "README.md": []byte("# hi\n"),
			"a.yaml": cm("a"), "sub/b.yaml": cm("b"),
			"overlays/prod/a.yaml": cm("prod-a"),
			"other/fleet.yaml":     []byte("helm: {}\n"),
			"other/c.yaml":         cm("c"),
			"charts/x/Chart.yaml":  []byte("apiVersion: v2\nname: x\nversion: 0.1.0\n"),
			"charts/x/values.yaml": []byte("a: 1\n"),
		}, fleet.BundleDeploymentOptions{}, []string{"a", "b"}},
		{"a chart at the root", map[string][]byte{
			"fleet.yaml": []byte("helm: {releaseName: r}\n"), "README.md": []byte("# chart\n"),
			"Chart.yaml":        []byte("apiVersion: v2\nname: shop\nversion: 0.1.0\n"),
			"values.yaml":       []byte("n: one\n"),
			"templates/cm.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-{{ .Values.n }}\n"),
		}, fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{ReleaseName: "r", Values: &fleet.GenericMap{Data: map[string]any{"n": "two"}}}}, []string{"r-two"}},
		{"a kustomization at the root", map[string][]byte{
			"fleet.yaml":         []byte("namespace: x\n"),
			"kustomization.yaml": []byte("resources: [a.yaml]\nnamePrefix: k-\n"),
			"a.yaml":             cm("a"), "unused.yaml": cm("unused"),
		}, fleet.BundleDeploymentOptions{}, []string{"k-a"}},
		{"options the Bundle sets win", map[string][]byte{
			"Chart.yaml":            []byte("not a chart: the Bundle names another\n"),
			"app/Chart.yaml":        []byte("apiVersion: v2\nname: app\nversion: 0.1.0\n"),
			"app/templates/cm.yaml": cm("from-app"),
		}, fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "app"}}, []string{"from-app"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := renderer.RenderFiles("b", c.files, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := out.Objects()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.GetName())
			}
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Errorf("rendered %v, want %v:\n%s", got, c.want, out.YAML)
			}
		})
	}
}
