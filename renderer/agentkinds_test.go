package renderer_test

import (
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gitops-fleet/fleet/charts"
	"github.com/gitops-fleet/fleet/renderer"
)

// TestAgentKinds checks that renderer.AgentKinds names every kind the agent
// chart renders (a missing one would cost each first push a discovery round
// trip): every object of every test Cluster's render, and every kind a
// template of the chart names, whichever values turn it on.
func TestAgentKinds(t *testing.T) {
	known := func(gk schema.GroupKind) bool { return slices.Contains(renderer.AgentKinds, gk) }
	if !known(schema.GroupKind{Kind: "Namespace"}) {
		t.Error("AgentKinds lacks the Namespace the push makes")
	}
	r := newRenderer(t)
	files, _ := filepath.Glob("testdata/clusters/*.yaml")
	if len(files) == 0 {
		t.Fatal("no test clusters")
	}
	for _, f := range files {
		_, out := renderFile(t, r, f)
		objs, err := out.Objects()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if gk := o.GroupVersionKind().GroupKind(); !known(gk) {
				t.Errorf("%s renders %s %s, which renderer.AgentKinds lacks", filepath.Base(f), gk, o.GetName())
			}
		}
	}

	kindLine := regexp.MustCompile(`(?m)^kind:\s*(\w+)`)
	kinds := map[string]bool{}
	for _, gk := range renderer.AgentKinds {
		kinds[gk.Kind] = true
	}
	templates, err := fs.Glob(charts.FleetAgent(), "templates/*.yaml")
	if err != nil || len(templates) == 0 {
		t.Fatalf("no templates in the agent chart: %v", err)
	}
	for _, name := range templates {
		b, err := fs.ReadFile(charts.FleetAgent(), name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range kindLine.FindAllSubmatch(b, -1) {
			if !kinds[string(m[1])] {
				t.Errorf("%s makes a %s, which renderer.AgentKinds lacks", name, m[1])
			}
		}
	}
}
