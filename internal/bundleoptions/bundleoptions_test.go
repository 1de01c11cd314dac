package bundleoptions_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/fleetcrds"
	"github.com/gitops-fleet/fleet/internal/bundleoptions"
)

// TestTableCoversFleet: every spec path of Fleet's Bundle schema has its
// row (itself, or the row of an option it is part of), and every row is a
// path of Fleet's schema, so a Fleet option added to our API without a
// decision about it fails here.
func TestTableCoversFleet(t *testing.T) {
	crd, err := fleetcrds.Fleet("bundles")
	if err != nil {
		t.Fatal(err)
	}
	s, err := fleetcrds.Schema(crd)
	if err != nil {
		t.Fatal(err)
	}
	paths := fleetcrds.Paths(s)
	var rows []string
	for _, o := range bundleoptions.Table {
		rows = append(rows, o.Path)
		if _, ok := paths["spec."+o.Path]; !ok {
			t.Errorf("row %s is no path of Fleet's Bundle spec", o.Path)
		}
		if o.Support != bundleoptions.Implemented && o.Why == "" {
			t.Errorf("row %s (%s) says no why", o.Path, o.Support)
		}
	}
	for _, p := range fleetcrds.Under(paths, "spec") {
		p = strings.TrimPrefix(p, "spec.")
		if rest, ok := strings.CutPrefix(p, "targets[]."); ok && bundleoptions.IsOption(rest) {
			p = rest // a target's option: the option's row
		}
		if !covered(p, rows) {
			t.Errorf("Fleet's spec.%s has no row in bundleoptions.Table", p)
		}
	}
}

// covered: p is a row, is within one (helm.valuesFrom[].secretKeyRef under
// helm.valuesFrom), or holds rows (helm, targets[]).
func covered(p string, rows []string) bool {
	for _, r := range rows {
		if p == r || within(p, r) || within(r, p) {
			return true
		}
	}
	return false
}

func within(p, parent string) bool {
	if !strings.HasPrefix(p, parent) || len(p) == len(parent) {
		return false
	}
	return strings.ContainsRune(".[{", rune(p[len(parent)]))
}

func TestTableSorted(t *testing.T) {
	var paths []string
	for _, o := range bundleoptions.Table {
		paths = append(paths, o.Path)
	}
	if !slices.IsSorted(paths) {
		t.Errorf("bundleoptions.Table is not sorted by path")
	}
	if len(slices.Compact(slices.Clone(paths))) != len(paths) {
		t.Errorf("bundleoptions.Table has a path twice")
	}
}

// TestDocsListEveryOption: docs/operations.md "Bundle options (Fleet
// compatibility)" has one row per path of the table, and no other.
func TestDocsListEveryOption(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Bundle options (Fleet compatibility)\n")
	if !ok {
		t.Fatal(`docs/operations.md has no section "Bundle options (Fleet compatibility)"`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")
	var docs []string
	for _, m := range row.FindAllStringSubmatch(sec, -1) {
		docs = append(docs, m[1])
	}
	var table []string
	for _, o := range bundleoptions.Table {
		table = append(table, o.Path)
	}
	slices.Sort(docs)
	if !slices.Equal(docs, table) {
		t.Errorf("docs rows %v\nwant the table's %v", docs, table)
	}
}

func TestUnsupported(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want []string
	}{
		{"what fleet apply writes", `
defaultNamespace: app
ignore: {}
correctDrift: {}
helm: {chart: chart, releaseName: app, values: {replicas: 2}, takeOwnership: false}
targets:
- name: all
  clusterSelector: {}
  ignore: {}
`, nil},
		{"harmless options", `
correctDrift: {enabled: true, keepFailHistory: true}
helm: {disableDNS: true, maxHistory: 3, waitForJobs: true}
createNamespace: true
targetCustomizationMode: FirstMatch
`, nil},
		{"charts from a repository, a registry or a URL (embedded by the GitRepo source)", `
helm: {chart: oci://registry.example/app, version: 1.2.3}
targets:
- name: a
- name: b
  helm: {repo: https://charts.example, chart: app, version: ^1.0.0}
- name: c
  helm: {chart: https://charts.example/app-1.0.0.tgz}
`, nil},
		{"the Bundle's options and its own fields", `
helm: {chart: oci://registry.example/app, valuesFrom: [{secretKeyRef: {name: s}}]}
overwrites: [{kind: ConfigMap, name: a}]
createNamespace: false
dependsOn: [{name: db}]
rolloutStrategy: {maxUnavailable: 10%}
targetCustomizationMode: AllMatches
ignore: {conditions: [{type: Ready}]}
valuesHash: abc
`, []string{
			"spec.overwrites: ",
		}},
		{"an empty rollout strategy", `
rolloutStrategy: {partitions: []}
diff: {comparePatches: []}
`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var spec fleet.BundleSpec
			if err := yaml.UnmarshalStrict([]byte(c.yaml), &spec); err != nil {
				t.Fatal(err)
			}
			got := bundleoptions.Unsupported(&spec)
			if len(got) != len(c.want) {
				t.Fatalf("findings %v, want %d: %v", got, len(c.want), c.want)
			}
			for i, f := range got {
				if !strings.HasPrefix(f.String(), c.want[i]) {
					t.Errorf("finding %d = %q, want it to start with %q", i, f, c.want[i])
				}
			}
			err := bundleoptions.Check(&spec)
			if (err != nil) != (len(c.want) > 0) {
				t.Errorf("Check = %v", err)
			}
		})
	}
}

// TestNoEffectAndImplementedAreNotRefused: a Bundle setting every option
// the table does not call not-yet deploys.
func TestNoEffectAndImplementedAreNotRefused(t *testing.T) {
	spec := fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
		DefaultNamespace: "a", TargetNamespace: "b", KeepResources: true, ForceSyncGeneration: 2, ServiceAccount: "sa",
		NamespaceLabels: map[string]string{"a": "b"}, NamespaceAnnotations: map[string]string{"a": "b"}, CreateNamespace: ptr.To(true),
		CorrectDrift: &fleet.CorrectDrift{Enabled: true, Force: true, KeepFailHistory: true},
		Kustomize:    &fleet.KustomizeOptions{Dir: "k"},
		Helm: &fleet.HelmOptions{Chart: "chart", ReleaseName: "r", Values: &fleet.GenericMap{Data: map[string]any{"a": 1.0}}, ValuesFiles: []string{"v.yaml"},
			TakeOwnership: true, TimeoutSeconds: 3, MaxHistory: 2, WaitForJobs: true, DisablePreProcess: true, DisableDNS: true, DisableDependencyUpdate: true},
	}, Paused: true, Resources: []fleet.BundleResource{{Name: "a.yaml"}}, Targets: []fleet.BundleTarget{{Name: "t", ClusterName: "c", DoNotDeploy: true}}}
	if f := bundleoptions.Unsupported(&spec); len(f) > 0 {
		t.Errorf("refused: %v", f)
	}
}
