package review

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const example = "../examples/gitops"

// copyTree copies examples/gitops into a temporary directory and applies
// edits (file → replacements old → new) to it: a pull request.
func copyTree(t *testing.T, edits map[string][][2]string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(example, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(example, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, e := range edits[rel] {
			if !bytes.Contains(b, []byte(e[0])) {
				t.Fatalf("%s has no %q to edit", rel, e[0])
			}
			b = bytes.Replace(b, []byte(e[0]), []byte(e[1]), 1)
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func diff(t *testing.T, head string) *Report {
	t.Helper()
	b, err := Load(example, "base", "config/fleet-controller.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h, err := Load(head, "head", "config/fleet-controller.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Diff(b, h)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func touched(r *Report) []string {
	var out []string
	for _, c := range r.Clusters {
		if c.Touched() {
			out = append(out, c.Key)
		}
	}
	return out
}

// golden compares the text and markdown reports with testdata/<name>.txt
// and .md (go test ./review -update rewrites them).
func golden(t *testing.T, r *Report, name string) {
	t.Helper()
	for ext, write := range map[string]func(*bytes.Buffer) error{
		".txt": func(b *bytes.Buffer) error { return r.Text(b) },
		".md":  func(b *bytes.Buffer) error { return r.Markdown(b) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", name+ext)
		if *update {
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./review -update)", err)
		}
		if d := cmp.Diff(string(want), b.String()); d != "" {
			t.Errorf("%s differs (-want +got); if intended, go test ./review -update:\n%s", path, d)
		}
	}
}

func TestNoChange(t *testing.T) {
	r := diff(t, copyTree(t, nil))
	if r.Changed() || len(touched(r)) > 0 {
		t.Errorf("the same tree on both sides: touched %v", touched(r))
	}
}

// The walk-through's pull request: a redeployAgentGeneration bump rolls
// exactly one agent, and nothing else moves.
func TestRedeployAgentGenerationBump(t *testing.T) {
	r := diff(t, copyTree(t, map[string][][2]string{
		"clusters/dev-1.yaml": {{"redeployAgentGeneration: 1", "redeployAgentGeneration: 2"}},
	}))
	changed, rolled, moves := r.Summary()
	if changed != 1 || rolled != 1 || moves != 0 {
		t.Fatalf("changed %d, rolled %d, Bundle moves %d; want 1, 1, 0", changed, rolled, moves)
	}
	c := r.Clusters[0]
	if c.Key != "fleet-default/dev-1" || !c.Redeploy || !c.Rolls || len(c.Why) != 1 || c.Why[0] != "redeployAgentGeneration 1 → 2" {
		t.Errorf("dev-1: %+v", c)
	}
	if !strings.Contains(c.ManifestDiff, `-          value: "1"`) || !strings.Contains(c.ManifestDiff, `+          value: "2"`) {
		t.Errorf("the manifest diff does not show GENERATION 1 → 2:\n%s", c.ManifestDiff)
	}
	golden(t, r, "generation-bump")
}

// A label change moves Bundles: dev-1 leaves the dev group (Bundle hello's
// first target) and no target of hello selects env: staging.
func TestLabelChangeMovesBundles(t *testing.T) {
	r := diff(t, copyTree(t, map[string][][2]string{
		"clusters/dev-1.yaml": {{"    env: dev", "    env: staging"}},
	}))
	c := r.Clusters[0]
	if c.Key != "fleet-default/dev-1" || c.Rolls || c.Redeploy {
		t.Errorf("a label change redeploys or rolls the agent: %+v", c)
	}
	if d := cmp.Diff([]string{"hello"}, c.BundlesRemoved); d != "" || len(c.BundlesAdded) != 0 {
		t.Errorf("Bundles (-want +got removed): %s; added %v", d, c.BundlesAdded)
	}
	// To env: prod, hello stays under its other target.
	r = diff(t, copyTree(t, map[string][][2]string{
		"clusters/dev-1.yaml": {{"    env: dev", "    env: prod"}},
	}))
	if d := cmp.Diff([]string{"hello (target dev → prod)"}, r.Clusters[0].BundlesRetargeted); d != "" {
		t.Errorf("retargeted (-want +got): %s", d)
	}
	golden(t, r, "label-to-prod")
}

// A setting rolls the agent; a new server in the kubeconfig Secret pushes
// the agent there without changing its pod; no credential is ever shown.
func TestSettingAndServer(t *testing.T) {
	r := diff(t, copyTree(t, map[string][][2]string{
		"clusters/dev-1.yaml": {
			{"  redeployAgentGeneration: 1\n", "  redeployAgentGeneration: 1\n  agentEnvVars:\n    - name: LOG_LEVEL\n      value: debug\n"},
		},
	}))
	if c := r.Clusters[0]; !c.Rolls || !c.Redeploy || !strings.Contains(strings.Join(c.Why, ";"), "agent setting env changed") {
		t.Errorf("an env var: %+v", c)
	}
	r = diff(t, copyTree(t, map[string][][2]string{
		"clusters/dev-1.yaml": {
			{"server: https://dev-1.example.invalid:6443", "server: https://dev-1b.example.invalid:6443"},
			{"certificate-authority-data: PLACEHOLDER-base64-encoded-CA-of-dev-1", ""},
			{"PLACEHOLDER-token-with-cluster-admin-rights-on-dev-1", "NEW-SECRET-TOKEN"},
		},
	}))
	c := r.Clusters[0]
	if !c.Redeploy || c.Rolls || !strings.Contains(strings.Join(c.Why, ";"), "another server") {
		t.Errorf("a new server: %+v", c)
	}
	var out bytes.Buffer
	_ = r.Text(&out)
	_ = r.Markdown(&out)
	if strings.Contains(out.String(), "NEW-SECRET-TOKEN") || strings.Contains(out.String(), "dev-1b.example") {
		t.Errorf("the report shows the kubeconfig Secret's content:\n%s", out.String())
	}
}

// A new manager-initiated Cluster: deployed with its bootstrap Secret, whose
// values are masked.
func TestNewClusterMasksSecrets(t *testing.T) {
	head := copyTree(t, nil)
	b, err := os.ReadFile(filepath.Join(example, "clusters/dev-1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte("dev-1"), []byte("dev-9"))
	if err := os.WriteFile(filepath.Join(head, "clusters/dev-9.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	k, _ := os.ReadFile(filepath.Join(head, "kustomization.yaml"))
	k = bytes.Replace(k, []byte("  - clusters/dev-1.yaml\n"), []byte("  - clusters/dev-1.yaml\n  - clusters/dev-9.yaml\n"), 1)
	if err := os.WriteFile(filepath.Join(head, "kustomization.yaml"), k, 0o644); err != nil {
		t.Fatal(err)
	}
	r := diff(t, head)
	if d := cmp.Diff([]string{"fleet-default/dev-9"}, touched(r)); d != "" {
		t.Fatalf("touched (-want +got): %s", d)
	}
	c := r.Clusters[1]
	if c.Change != Added || !strings.Contains(c.ManifestDiff, "+# Secret cattle-fleet-system/fleet-agent-bootstrap") {
		t.Fatalf("dev-9: %s; manifests:\n%s", c.Change, c.ManifestDiff)
	}
	if !strings.Contains(c.ManifestDiff, "<masked sha256:") || strings.Contains(c.ManifestDiff, "fleet:import-token") {
		t.Errorf("the bootstrap Secret's values are not masked:\n%s", c.ManifestDiff)
	}
	// hello by the dev group; payments-view names dev-1 only.
	if d := cmp.Diff([]string{"hello"}, c.BundlesAdded); d != "" {
		t.Errorf("Bundles of dev-9 (-want +got): %s", d)
	}
}

func TestBadInput(t *testing.T) {
	head := copyTree(t, map[string][][2]string{"bundles/hello.yaml": {{"kind: Bundle", "kind: Bundle\n  broken: [unclosed"}}})
	if _, err := Load(head, "head", ""); err == nil || !strings.Contains(err.Error(), "head") {
		t.Errorf("broken YAML: %v; want an error naming the side", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing"), "base", ""); err == nil || !strings.Contains(err.Error(), "base") {
		t.Errorf("a missing base: %v", err)
	}
	plain := t.TempDir()
	if err := os.WriteFile(filepath.Join(plain, "c.yaml"), []byte("apiVersion: fleet.cattle.io/v1alpha1\nkind: Cluster\nmetadata: {name: x}\nspec: {nope: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(plain, "head", ""); err == nil || !strings.Contains(err.Error(), "c.yaml, document 1") || !strings.Contains(err.Error(), "nope") {
		t.Errorf("an unknown field: %v; want an error naming the file, document and field", err)
	}
}
