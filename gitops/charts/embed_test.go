package charts_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/charts"
	"github.com/gitops-fleet/fleet/renderer"
)

// TestResources_RenderWhereTheRendererLooks: a chart fetched from a
// repository, embedded with the options as the fleet.yaml wrote them,
// renders with the project's renderer (offline) with the Bundle's values;
// the options keep helm.repo and helm.version.
func TestResources_RenderWhereTheRendererLooks(t *testing.T) {
	s, _ := privateRepo(t)
	h := fleet.HelmOptions{Repo: s.URL, Chart: "app", Version: "^1.0.0", ReleaseName: "web", Values: &fleet.GenericMap{Data: map[string]any{"color": "blue"}}}
	ch, err := charts.NewFetcher(charts.Options{}).Fetch(context.Background(), charts.Request{Helm: h, Auth: charts.Auth{Username: "bot", Password: "s3cret", CABundle: s.caPEM()}, URLRegex: ".*"})
	if err != nil {
		t.Fatal(err)
	}
	for _, compress := range []bool{false, true} {
		res, err := charts.Resources(h, ch, compress)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(ch.Files) || !strings.HasPrefix(res[0].Name, ".chart/") || !strings.Contains(res[0].Name, "/app/") {
			t.Fatalf("resources %v", res)
		}
		if enc := res[0].Encoding; (enc == "base64+gz") != compress {
			t.Errorf("compress %v: encoding %q", compress, enc)
		}
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "fleet-default"},
			Spec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: "apps", Helm: &h}, Resources: res}}
		out, err := renderer.RenderBundle(b, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if y := string(out.YAML); !strings.Contains(y, "name: web-app") || !strings.Contains(y, `version: "1.2.0"`) || !strings.Contains(y, `color: "blue"`) {
			t.Errorf("rendered:\n%s", y)
		}
	}
}

// TestWanted: the charts a Bundle's renderer may look for: its own, and
// the merged options of targets that change chart, repo or version; local
// charts and repeats are left out.
func TestWanted(t *testing.T) {
	spec := &fleet.BundleSpec{
		BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "app", Repo: "https://charts.example", Version: "1.0.0", ReleaseName: "x"}},
		Targets: []fleet.BundleTarget{
			{Name: "same", BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Version: "1.0.0"}}},
			{Name: "values only", BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{ReleaseName: "y"}}},
			{Name: "canary", BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Version: "1.1.0"}}},
			{Name: "other", BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "other", Repo: "https://other.example", Version: "2.0.0"}}},
		},
	}
	got := charts.Wanted(spec)
	want := []fleet.HelmOptions{
		{Chart: "app", Repo: "https://charts.example", Version: "1.0.0"},
		{Chart: "app", Repo: "https://charts.example", Version: "1.1.0"},
		{Chart: "other", Repo: "https://other.example", Version: "2.0.0"},
	}
	if len(got) != len(want) {
		t.Fatalf("Wanted = %+v", got)
	}
	for i := range want {
		if g := got[i]; g.Chart != want[i].Chart || g.Repo != want[i].Repo || g.Version != want[i].Version || g.ReleaseName != "" {
			t.Errorf("Wanted[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	if got := charts.Wanted(&fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart"}}}); len(got) != 0 {
		t.Errorf("a local chart: %+v", got)
	}
}
