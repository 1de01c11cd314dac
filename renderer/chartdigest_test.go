package renderer_test

import (
	"github.com/gitops-fleet/fleet/charts/chartstest"
	"strings"
	"testing"

	"github.com/gitops-fleet/fleet/renderer"
)

// TestAgentChartDigest_IdentifiesTheChart: the digest (and so the hash that
// decides a redeploy) is the same for every load of the same chart, from the
// binary or from the repository, and changes with any template; the values
// hash alone does not see a chart change.
func TestAgentChartDigest_IdentifiesTheChart(t *testing.T) {
	r1, r2 := newRenderer(t), newRenderer(t)
	if r1.ChartDigest() == "" || r1.ChartDigest() != r2.ChartDigest() {
		t.Fatalf("two loads of the embedded chart: digests %q and %q", r1.ChartDigest(), r2.ChartDigest())
	}
	dir, err := renderer.LoadChartDir("../charts/fleet-agent")
	if err != nil {
		t.Fatal(err)
	}
	if dir.Digest() != r1.ChartDigest() {
		t.Errorf("charts/fleet-agent on disk has digest %s, the embedded one %s", dir.Digest(), r1.ChartDigest())
	}

	v, out1 := renderFile(t, r1, "testdata/clusters/01-minimal-manager.yaml")
	h1, err := r1.Hash(v)
	if err != nil {
		t.Fatal(err)
	}
	if h2, _ := r2.Hash(v); h2 != h1 {
		t.Errorf("same chart, same values: hashes %s and %s", h1, h2)
	}

	patched, err := renderer.NewAgentRendererFS(chartstest.PatchedFleetAgent(t, "templates/deployment.yaml",
		"  template:\n    metadata:\n", "  template:\n    metadata:\n      annotations:\n        fleet.test/chart: v2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if patched.ChartDigest() == r1.ChartDigest() {
		t.Error("a changed template left the chart digest as it was")
	}
	hp, err := patched.Hash(v)
	if err != nil {
		t.Fatal(err)
	}
	if hp == h1 {
		t.Error("a changed chart left the agent hash as it was: the agents would not be redeployed")
	}
	out2, err := patched.Render(v)
	if err != nil {
		t.Fatal(err)
	}
	if string(out2.YAML) == string(out1.YAML) || !strings.Contains(string(out2.YAML), "fleet.test/chart: v2") {
		t.Error("the patched chart does not render the patch")
	}
}
