package bundlereader

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// TestConformance_FleetExamples compares what the reader makes of each
// rancher/fleet-examples case with a local chart against the Bundle
// Fleet's `fleet apply -o - test` made of it (tests/expected/<case>/
// bundle.yaml). It needs a checkout of rancher/fleet-examples (not part of
// this repository: it has no licence), named by FLEET_EXAMPLES_DIR; it is
// skipped without one. The differences allowed, each Fleet's bookkeeping
// or the Fleet version that wrote the golden files, are removed before
// comparing: our fleet.cattle.io/repo-name label, Fleet's empty
// `correctDrift: {}` and `ignore: {}`, and fleet.yaml among the resources
// (Fleet's fleet apply leaves it out since 2025; the golden files are
// older).
func TestConformance_FleetExamples(t *testing.T) {
	dir := os.Getenv("FLEET_EXAMPLES_DIR")
	if dir == "" {
		t.Skip("FLEET_EXAMPLES_DIR (a checkout of rancher/fleet-examples) is not set")
	}
	cases, err := filepath.Glob(filepath.Join(dir, "tests/expected/*/*/bundle.yaml"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("no tests/expected/*/*/bundle.yaml under %s (%v)", dir, err)
	}
	for _, golden := range cases {
		name, _ := filepath.Rel(filepath.Join(dir, "tests/expected"), filepath.Dir(golden))
		t.Run(name, func(t *testing.T) {
			src := filepath.Join(dir, name)
			fys, _ := filepath.Glob(filepath.Join(src, "*fleet.yaml"))
			more, _ := filepath.Glob(filepath.Join(src, "*", "fleet.yaml"))
			for _, f := range append(fys, more...) {
				if fy, err := os.ReadFile(f); err == nil && remoteChart.Match(fy) {
					t.Skipf("%s names a chart from a repository or URL (gitops/charts fetches it)", f)
				}
			}
			ns := "fleet-local"
			if strings.HasPrefix(name, "multi-cluster/") {
				ns = "fleet-default"
			}
			res, err := Read(t.Context(), src, "test", nil, Options{Namespace: ns, Commit: "fake"})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Complete() {
				t.Fatalf("errors: %v", res.Errors)
			}
			data, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			want := splitGolden(t, data)
			if len(want) != len(res.Bundles) {
				t.Fatalf("%d Bundles, Fleet made %d", len(res.Bundles), len(want))
			}
			for i, b := range res.Bundles {
				// Through YAML, as the golden file: numbers are float64 on
				// both sides.
				data, err := yaml.Marshal(b.Bundle)
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]any{}
				if err := yaml.Unmarshal(data, &got); err != nil {
					t.Fatal(err)
				}
				delete(got, "status")
				md := got["metadata"].(map[string]any)
				delete(md, "creationTimestamp")
				delete(md["labels"].(map[string]any), fleet.RepoLabel)
				normalize(want[i])
				normalize(got)
				if d := cmp.Diff(want[i], got); d != "" {
					t.Errorf("Bundle %s differs from Fleet's (-Fleet +ours):\n%s", b.Bundle.Name, d)
				}
			}
		})
	}
}

var remoteChart = regexp.MustCompile(`(?m)^\s*(repo:\s*["']?[a-z]|chart:\s*["']?[a-z]+://)`)

// splitGolden splits a golden file into Bundles: documents separated by
// "---" or, in some files, only by their apiVersion line.
func splitGolden(t *testing.T, data []byte) []map[string]any {
	var out []map[string]any
	var cur []byte
	flush := func() {
		if len(bytes.TrimSpace(cur)) == 0 {
			return
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(cur, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
		cur = nil
	}
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("---")) {
			flush()
			continue
		}
		if bytes.HasPrefix(line, []byte("apiVersion:")) {
			flush()
		}
		cur = append(cur, line...)
	}
	flush()
	return out
}

// normalize drops what the comparison allows to differ (see the test).
func normalize(b map[string]any) {
	spec, _ := b["spec"].(map[string]any)
	dropEmpty := func(m map[string]any) {
		for _, k := range []string{"correctDrift", "ignore"} {
			if v, ok := m[k].(map[string]any); ok && len(v) == 0 {
				delete(m, k)
			}
		}
	}
	dropEmpty(spec)
	if targets, ok := spec["targets"].([]any); ok {
		for _, tg := range targets {
			dropEmpty(tg.(map[string]any))
		}
	}
	if res, ok := spec["resources"].([]any); ok {
		kept := res[:0]
		for _, r := range res {
			if r.(map[string]any)["name"] != "fleet.yaml" {
				kept = append(kept, r)
			}
		}
		spec["resources"] = kept
	}
}
