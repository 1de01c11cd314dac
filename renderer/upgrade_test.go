package renderer_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gitops-fleet/fleet/renderer"
)

// The Helm 4 move changed the agent chart's files (one document per
// template, no trailing whitespace; see whitespace_test.go), so its digest,
// and with it every agent's hash and revision: a controller upgrade over
// agents rendered before the move makes exactly one new agent revision
// (CHANGELOG.md 0.1.0, Upgrading). This shows that revision changes no
// object the agent applies, the Deployment's pod template included, so no
// agent pod restarts: the chart as it was before the move, kept as an
// AgentRollout keeps a revision's chart (Chart.Archive), renders the same
// objects as today's chart for every test Cluster.
func TestAgentChart_Helm4MoveChangesNoAgentObject(t *testing.T) {
	b, err := os.ReadFile("testdata/fleet-agent-before-helm4.tgz")
	if err != nil {
		t.Fatal(err)
	}
	before, err := renderer.NewAgentRendererArchive(b)
	if err != nil {
		t.Fatal(err)
	}
	now := newRenderer(t)
	if before.ChartDigest() == now.ChartDigest() {
		t.Fatal("the chart before the move has today's digest: the fixture is not the earlier chart")
	}
	files, _ := filepath.Glob("testdata/clusters/*.yaml")
	if len(files) < 8 {
		t.Fatalf("want at least 8 test clusters, have %d", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			v, out := renderFile(t, now, f)
			old, err := before.Render(v)
			if err != nil {
				t.Fatal(err)
			}
			h1, _ := before.Hash(v)
			h2, _ := now.Hash(v)
			if h1 == h2 {
				t.Errorf("same agent hash before and after the chart change: the upgrade note is wrong")
			}
			oldObjs, newObjs := objects(t, old), objects(t, out)
			if len(oldObjs) != len(newObjs) {
				t.Fatalf("%d objects before the move, %d after", len(oldObjs), len(newObjs))
			}
			for i := range newObjs {
				if !reflect.DeepEqual(oldObjs[i].Object, newObjs[i].Object) {
					t.Errorf("object %d (%s %s) changed:\nbefore %v\nafter  %v", i, newObjs[i].GetKind(), newObjs[i].GetName(), oldObjs[i].Object, newObjs[i].Object)
				}
			}
			if !reflect.DeepEqual(deployment(t, old).Spec.Template, deployment(t, out).Spec.Template) {
				t.Error("the agent Deployment's pod template changed: every agent pod would restart")
			}
		})
	}
}
