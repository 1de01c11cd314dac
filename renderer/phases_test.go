package renderer_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/manifest"
	"github.com/gitops-fleet/fleet/renderer"
)

const hookCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

func hookJob(name, events, weight string) string {
	return `apiVersion: batch/v1
kind: Job
metadata:
  name: ` + name + `
  annotations:
    helm.sh/hook: ` + events + `
    helm.sh/hook-weight: "` + weight + `"
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: pause}]
`
}

// hooksBundle is what `fleet apply` writes for a chart with crds/, two
// pre-install hooks of weights 5 and -5 (in that file order), a
// pre-install,pre-upgrade ConfigMap hook, a post-install hook, a test hook,
// a pre-delete hook and a main Deployment and ConfigMap.
func hooksBundle() *fleet.Bundle {
	return &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Name: "hooked", Namespace: "fleet-default"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace: "hooked",
				Helm:             &fleet.HelmOptions{Chart: "chart"},
				IgnoreOptions:    &fleet.IgnoreOptions{},
				CorrectDrift:     &fleet.CorrectDrift{},
			},
			Resources: []fleet.BundleResource{
				{Name: "chart/Chart.yaml", Content: "apiVersion: v2\nname: hooked\nversion: 0.1.0\n"},
				{Name: "chart/crds/widgets.yaml", Content: hookCRD},
				{Name: "chart/templates/a-late.yaml", Content: hookJob("late", "pre-install", "5")},
				{Name: "chart/templates/b-early.yaml", Content: hookJob("early", "pre-install", "-5")},
				{Name: "chart/templates/both.yaml", Content: `apiVersion: v1
kind: ConfigMap
metadata:
  name: both
  annotations: {helm.sh/hook: "pre-install, pre-upgrade"}
`},
				{Name: "chart/templates/post.yaml", Content: hookJob("after", "post-install", "0")},
				{Name: "chart/templates/test.yaml", Content: hookJob("smoke", "test", "0")},
				{Name: "chart/templates/cleanup.yaml", Content: hookJob("cleanup", "pre-delete", "0")},
				{Name: "chart/templates/main.yaml", Content: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec: {containers: [{name: c, image: pause}]}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
`},
			},
		},
	}
}

type listed struct{ phase, kind, name string }

// phasesOf lists the content's objects under the phase they are written
// in, with the agent's reader (bundlecontent.SplitPhases).
func phasesOf(t *testing.T, content []byte) []listed {
	t.Helper()
	sections, err := bundlecontent.SplitPhases(content)
	if err != nil {
		t.Fatal(err)
	}
	var out []listed
	for _, s := range sections {
		objs, err := manifest.Decode(s.YAML)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			out = append(out, listed{string(s.Phase), o.GetKind(), o.GetName()})
		}
	}
	return out
}

func TestRenderBundle_PhasesInApplyOrder(t *testing.T) {
	out, err := renderer.RenderBundle(hooksBundle(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := phasesOf(t, out.YAML)
	want := []listed{
		{"crds", "CustomResourceDefinition", "widgets.example.com"},
		// Weight first (-5 before 5, whatever the file order), then name.
		{"pre-install", "Job", "early"},
		{"pre-install", "ConfigMap", "both"},
		{"pre-install", "Job", "late"},
		// main keeps Helm's install order (ConfigMap before Deployment).
		{"main", "ConfigMap", "settings"},
		{"main", "Deployment", "app"},
		{"post-install", "Job", "after"},
		{"pre-delete", "Job", "cleanup"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v\nwant %v\ncontent:\n%s", got, want, out.YAML)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("object %d: got %v, want %v\ncontent:\n%s", i, got[i], want[i], out.YAML)
		}
	}
	// The test hook runs nowhere: it is not in the content at all.
	if strings.Contains(string(out.YAML), "smoke") {
		t.Errorf("the test hook is in the content:\n%s", out.YAML)
	}
	// The hook of two events is written once (an agent that knows no
	// phases would apply it twice otherwise) and named in its second phase.
	if n := strings.Count(string(out.YAML), "name: both"); n != 1 {
		t.Errorf("hook 'both' written %d times, want once:\n%s", n, out.YAML)
	}
	if !strings.Contains(string(out.YAML), "---\n# fleet.cattle.io/phase: pre-upgrade\n---\n"+renderer.AlsoRunsMarker+"ConfigMap hooked/both (written under phase pre-install)\n") &&
		!strings.Contains(string(out.YAML), renderer.AlsoRunsMarker+"ConfigMap both (written under phase pre-install)") {
		t.Errorf("no pre-upgrade header naming hook 'both':\n%s", out.YAML)
	}
	// What an agent older than phases reads: every object once, markers
	// skipped as empty documents.
	objs, err := manifest.Decode(out.YAML)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(want) {
		t.Errorf("a phase-unaware reader sees %d objects, want %d", len(objs), len(want))
	}
}

func TestRenderBundle_WithoutHooksOrCRDsContentIsUnchanged(t *testing.T) {
	b := hooksBundle()
	var res []fleet.BundleResource
	for _, r := range b.Spec.Resources {
		if r.Name == "chart/Chart.yaml" || r.Name == "chart/templates/main.yaml" {
			res = append(res, r)
		}
	}
	b.Spec.Resources = res
	out, err := renderer.RenderBundle(b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out.YAML), bundlecontent.PhaseMarker) {
		t.Errorf("content of a Bundle without hooks or CRDs has phase markers (it would redeploy on upgrade):\n%s", out.YAML)
	}
	got := phasesOf(t, out.YAML)
	if len(got) != 2 || got[0].phase != "main" || got[1].phase != "main" {
		t.Errorf("got %v, want two main objects", got)
	}
}

func TestRenderBundle_RawManifestHooksArePhasedToo(t *testing.T) {
	// Fleet renders raw manifests through Helm as well: a hook annotation
	// in a plain YAML file makes a hook there too.
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Name: "raw", Namespace: "fleet-default"},
		Spec: fleet.BundleSpec{Resources: []fleet.BundleResource{
			{Name: "a.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: main}\n"},
			{Name: "b.yaml", Content: hookJob("migrate", "pre-upgrade", "1")},
			{Name: "c.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: odd, annotations: {helm.sh/hook: on-tuesday}}\n"},
		}},
	}
	out, err := renderer.RenderBundle(b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := phasesOf(t, out.YAML)
	want := []listed{{"pre-upgrade", "Job", "migrate"}, {"main", "ConfigMap", "main"}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %v, want %v (a hook of an unknown event is skipped, as Helm does)\n%s", got, want, out.YAML)
	}
}
