package renderer_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/gitops-fleet/fleet/renderer"
)

// A Bundle's chart sees the pinned Kubernetes version, in the controller
// and in a test binary alike (Helm 4's own default is v1.20.0 under `go
// test` and the client-go version otherwise), and a Chart.yaml kubeVersion
// constraint is checked against it: a chart for a current Kubernetes
// renders, one for a future one is refused with Helm's message.
func TestRender_ChartsSeeThePinnedKubeVersion(t *testing.T) {
	chart := func(constraint string) *renderer.Chart {
		t.Helper()
		c, err := renderer.LoadChartFS(fstest.MapFS{
			"c/Chart.yaml":        {Data: []byte("apiVersion: v2\nname: c\nversion: 0.1.0\nkubeVersion: \"" + constraint + "\"\n")},
			"c/templates/cm.yaml": {Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kube\ndata:\n  version: {{ .Capabilities.KubeVersion.Version | quote }}\n")},
		}, "c")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	out, err := renderer.Render(renderer.Input{Chart: chart(">=1.30.0-0"), ReleaseName: "r", Namespace: "ns"})
	if err != nil {
		t.Fatalf("a chart for Kubernetes >=1.30 does not render: %v", err)
	}
	if want := "version: \"" + renderer.KubeVersion + "\""; !strings.Contains(string(out.YAML), want) {
		t.Errorf("rendered %s, want %s", out.YAML, want)
	}
	if renderer.KubeVersion != "v1.37.0" {
		t.Errorf("renderer.KubeVersion is %s: a change re-renders every Bundle whose chart reads it; update docs/operations.md (Helm charts in Bundles) and CHANGELOG.md Upgrading, then this test", renderer.KubeVersion)
	}
	_, err = renderer.Render(renderer.Input{Chart: chart(">=1.99.0-0"), ReleaseName: "r", Namespace: "ns"})
	if err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Errorf("a chart for Kubernetes >=1.99 rendered (err %v), want Helm's kubeVersion refusal", err)
	}
}
