package chartpath_test

import (
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/chartpath"
)

// TestDir_IsFleetApplysLayout: the directory is the one Fleet's `fleet
// apply` writes a fetched chart to (the value is the resource prefix of
// rancher-monitoring in rancher/fleet-examples'
// tests/expected/single-cluster/helm-multi-chart/bundle.yaml), so Fleet's
// Bundles render here and ours render in Fleet.
func TestDir_IsFleetApplysLayout(t *testing.T) {
	h := &fleet.HelmOptions{Chart: "rancher-monitoring", Repo: "https://charts.rancher.io/", Version: "104.1.0+up57.0.3"}
	const want = ".chart/4989bb22244e3185526874e9e7fa882adade4b1dc68a3368bc8a14d905b83e90"
	if got := chartpath.Dir(h); got != want {
		t.Errorf("Dir = %s, want %s", got, want)
	}
}

func TestRemote(t *testing.T) {
	for _, c := range []struct {
		h    *fleet.HelmOptions
		want bool
	}{
		{nil, false},
		{&fleet.HelmOptions{Chart: "chart"}, false},
		{&fleet.HelmOptions{Chart: "./charts/app"}, false},
		{&fleet.HelmOptions{Chart: "app", Repo: "https://charts.example"}, true},
		{&fleet.HelmOptions{Repo: "oci://registry.example/charts/app"}, true},
		{&fleet.HelmOptions{Chart: "oci://registry.example/charts/app"}, true},
		{&fleet.HelmOptions{Chart: "https://charts.example/app-1.0.0.tgz"}, true},
	} {
		if got := chartpath.Remote(c.h); got != c.want {
			t.Errorf("Remote(%+v) = %v, want %v", c.h, got, c.want)
		}
	}
}

// TestDescribe_HidesCredentialsInURLs: a token or password written into a
// URL never reaches a message.
func TestDescribe_HidesCredentialsInURLs(t *testing.T) {
	got := chartpath.Describe(&fleet.HelmOptions{Chart: "app", Repo: "https://bot:s3cret@charts.example/x", Version: "^1"})
	const want = `chart "app" version "^1" from repo "https://xxxxx@charts.example/x"`
	if got != want {
		t.Errorf("Describe = %s, want %s", got, want)
	}
}
