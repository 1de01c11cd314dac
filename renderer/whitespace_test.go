package renderer_test

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"

	"github.com/gitops-fleet/fleet/renderer"
)

// lineStartSeparator is where Helm 4 splits a template's output into
// documents (helm.sh/helm/v4/pkg/release/v1/util.SplitManifests).
var lineStartSeparator = regexp.MustCompile(`(?m)^---`)

// Helm 4 keeps a document's trailing whitespace and prints it before the
// next "---" (helm/helm#32565), Helm 3 trims it: the agent chart prints the
// same bytes with both CLIs only because every template renders at most one
// document and ends in no whitespace. This checks the templates themselves,
// for every test Cluster's values, so it keeps failing for a template that
// breaks the rule even if a later Helm trims the output again; and it checks
// that the renderer's output (what the controller applies) has no blank or
// space-ended line before a "---".
func TestAgentChart_EveryTemplateRendersOneDocumentWithoutTrailingWhitespace(t *testing.T) {
	ch, err := loader.LoadDir("../charts/fleet-agent")
	if err != nil {
		t.Fatal(err)
	}
	r := newRenderer(t)
	files, _ := filepath.Glob("testdata/clusters/*.yaml")
	if len(files) < 8 {
		t.Fatalf("want at least 8 test clusters, have %d", len(files))
	}
	seen := map[string]bool{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			v, out := renderFile(t, r, f)
			js, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			vals, err := common.ReadValues(js)
			if err != nil {
				t.Fatal(err)
			}
			top, err := chartutil.ToRenderValues(ch, vals, common.ReleaseOptions{
				Name: renderer.AgentReleaseName, Namespace: v.Internal.SystemNamespace, Revision: 1, IsInstall: true,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			rendered, err := engine.Render(ch, top)
			if err != nil {
				t.Fatal(err)
			}
			for name, text := range rendered {
				if strings.HasPrefix(filepath.Base(name), "_") || strings.TrimSpace(text) == "" {
					continue
				}
				seen[name] = true
				if trimmed := strings.TrimRight(text, " \t\r\n"); trimmed != text {
					t.Errorf("%s ends in whitespace %q: Helm 4 prints it as a blank line before the next document; end the template with a chomping action ({{- ... -}})", name, text[len(trimmed):])
				}
				if n := len(lineStartSeparator.FindAllStringIndex(strings.TrimLeft(text, " \t\r\n"), -1)); n > 0 {
					t.Errorf("%s renders %d \"---\" separators: put each document in a template file of its own (Helm 4 keeps the newline before an inner \"---\")", name, n)
				}
			}
			y := string(out.YAML)
			for _, bad := range []string{"\n\n---", " \n---", "\t\n---"} {
				if strings.Contains(y, bad) {
					t.Errorf("the rendered agent has %q: Helm 3 and Helm 4 CLIs would print different bytes", bad)
				}
			}
			if strings.TrimRight(y, " \t\r\n")+"\n" != y {
				t.Errorf("the rendered agent does not end in exactly one newline")
			}
		})
	}
	// The value sets must reach the conditional templates too.
	for _, name := range []string{"deployment.yaml", "rbac.yaml", "rbac-binding.yaml", "scheduling.yaml", "poddisruptionbudget.yaml", "secret.yaml", "direct.yaml"} {
		if !seen["fleet-agent/templates/"+name] {
			t.Errorf("no test Cluster renders templates/%s: the check above never saw it", name)
		}
	}
}
