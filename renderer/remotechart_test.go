package renderer_test

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/chartpath"
	"github.com/gitops-fleet/fleet/renderer"
)

// remoteChartBundle is a Bundle as the GitRepo source (or Fleet's `fleet
// apply`) writes it for a chart from a repository: the options as the
// fleet.yaml wrote them, the chart's files under chartpath.Dir in a
// directory named after the chart.
func remoteChartBundle(h fleet.HelmOptions, embedded bool) *fleet.Bundle {
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet-default"},
		Spec:       fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: "web", Helm: &h}},
	}
	b.Spec.Helm.Values = &fleet.GenericMap{Data: map[string]any{"color": "green"}}
	if embedded {
		dir := chartpath.Dir(&h) + "/web/"
		b.Spec.Resources = []fleet.BundleResource{
			{Name: dir + "Chart.yaml", Content: testChart},
			{Name: dir + "values.yaml", Content: "color: red\nsize: s\n"},
			{Name: dir + "templates/cm.yaml", Content: gz(testTemplate), Encoding: "base64+gz"},
		}
	}
	return b
}

// TestRenderBundle_RemoteChartFromTheEmbeddedCopy: a Bundle naming a chart
// in a repository, an OCI registry or at a URL renders the copy it embeds,
// with the Bundle's values; helm.repo and helm.version stay as they are.
func TestRenderBundle_RemoteChartFromTheEmbeddedCopy(t *testing.T) {
	for _, h := range []fleet.HelmOptions{
		{Chart: "web", Repo: "https://charts.example", Version: "^0.1.0"},
		{Repo: "oci://registry.example/charts/web", Version: "0.1.0"},
		{Chart: "oci://registry.example/charts/web"},
		{Chart: "https://charts.example/web-0.1.0.tgz"},
	} {
		b := remoteChartBundle(h, true)
		out, err := renderer.RenderBundle(b, nil, nil)
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		if y := string(out.YAML); !strings.Contains(y, "name: web-settings") || !strings.Contains(y, `color: "green"`) || !strings.Contains(y, `size: "s"`) {
			t.Errorf("%+v rendered:\n%s", h, y)
		}
		if b.Spec.Helm.Repo != h.Repo || b.Spec.Helm.Version != h.Version {
			t.Errorf("options changed: %+v", b.Spec.Helm)
		}
	}
}

// TestRenderBundle_RemoteChartNotEmbeddedIsRefused: without the chart's
// files the renderer fetches nothing: the error names the chart and says
// who fetches it, with reason RemoteResourceRefused.
func TestRenderBundle_RemoteChartNotEmbeddedIsRefused(t *testing.T) {
	h := fleet.HelmOptions{Chart: "web", Repo: "https://user:pw@charts.example", Version: "^0.1.0"}
	_, err := renderer.RenderBundle(remoteChartBundle(h, false), nil, nil)
	var ne *renderer.ChartNotEmbeddedError
	if !errors.As(err, &ne) {
		t.Fatalf("err = %v, want a ChartNotEmbeddedError", err)
	}
	for _, want := range []string{`chart "web" version "^0.1.0" from repo "https://xxxxx@charts.example"`, chartpath.Dir(&h) + "/", "fetched by the GitRepo source or `fleet apply`", "never by the controller"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "pw") {
		t.Errorf("error shows the URL's password: %v", err)
	}
	if r := renderer.ReasonOf(err); r != fleet.RemoteResourceRefusedReason {
		t.Errorf("reason %s", r)
	}
	// Another version's copy is not this chart.
	other := remoteChartBundle(fleet.HelmOptions{Chart: "web", Repo: h.Repo, Version: "0.2.0"}, true)
	other.Spec.Helm.Version = h.Version
	if _, err := renderer.RenderBundle(other, nil, nil); !errors.As(err, &ne) {
		t.Errorf("a copy of another version rendered: %v", err)
	}
}

// TestRenderBundle_TargetChartVersion: a target naming another version
// renders that version's copy (the merged options' directory).
func TestRenderBundle_TargetChartVersion(t *testing.T) {
	h := fleet.HelmOptions{Chart: "web", Repo: "https://charts.example", Version: "0.1.0"}
	b := remoteChartBundle(h, true)
	v2 := h
	v2.Version = "0.2.0"
	dir := chartpath.Dir(&v2) + "/web/"
	b.Spec.Resources = append(b.Spec.Resources,
		fleet.BundleResource{Name: dir + "Chart.yaml", Content: "apiVersion: v2\nname: web\nversion: 0.2.0\n"},
		fleet.BundleResource{Name: dir + "templates/cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: v2}\n"})
	b.Spec.Targets = []fleet.BundleTarget{{Name: "canary", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "canary"}},
		BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Version: "0.2.0"}}}}
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "fleet-default", Labels: map[string]string{"env": "canary"}}}
	out, err := renderer.RenderBundle(b, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out.YAML), "name: v2") {
		t.Errorf("rendered:\n%s", out.YAML)
	}
}

// TestRenderBundle_TwoChartsInOneEmbeddedDir: an ambiguous copy is an
// error naming both, not a guess.
func TestRenderBundle_TwoChartsInOneEmbeddedDir(t *testing.T) {
	h := fleet.HelmOptions{Chart: "web", Repo: "https://charts.example"}
	b := remoteChartBundle(h, true)
	b.Spec.Resources = append(b.Spec.Resources, fleet.BundleResource{Name: chartpath.Dir(&h) + "/other/Chart.yaml", Content: "apiVersion: v2\nname: other\nversion: 1.0.0\n"})
	_, err := renderer.RenderBundle(b, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "holds 2 charts") || !strings.Contains(err.Error(), "/other") {
		t.Errorf("err = %v", err)
	}
}
