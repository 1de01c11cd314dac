package bundlereader

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

const fixtures = "testdata/repo"

// read reads paths of root as GitRepo "test" and fails on an argument error.
func read(t *testing.T, root string, paths []string, opts Options) *Result {
	t.Helper()
	res, err := Read(t.Context(), root, "test", paths, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func bundleNamed(t *testing.T, res *Result, name string) *fleet.Bundle {
	t.Helper()
	for _, b := range res.Bundles {
		if b.Bundle.Name == name {
			return b.Bundle
		}
	}
	t.Fatalf("no Bundle %q; have %v", name, bundleNames(res))
	return nil
}

func bundleNames(res *Result) []string {
	var out []string
	for _, b := range res.Bundles {
		out = append(out, b.Bundle.Name)
	}
	return out
}

func resourceNames(b *fleet.Bundle) []string {
	var out []string
	for _, r := range b.Spec.Resources {
		out = append(out, r.Name)
	}
	return out
}

func errorFor(res *Result, path string) error {
	for _, e := range res.Errors {
		if e.Path == path {
			return e
		}
	}
	return nil
}

// write makes files (path → content) under a new directory.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"

// TestRead_FixturesGiveFleetsBundles reads every fixture directory as one
// GitRepo path "*": the directories that become Bundles and their names
// (nested fleet.yaml rules), resources (fleet.yaml and values files left
// out, .fleetignore per directory, hidden files), labels, targets from
// targetCustomizations and overrideTargets, merged values files; the bad
// fleet.yaml and the chart from a repository are errors of their own paths
// and the others still give their Bundles.
func TestRead_FixturesGiveFleetsBundles(t *testing.T) {
	res := read(t, fixtures, []string{"*"}, Options{Namespace: "ws", Commit: "abc123", Labels: map[string]string{"env": "test"}})

	want := []string{"my-bundle", "test-helm", "test-ignore", "test-kustomize", "test-nested", "test-nested-app", "test-nested-app-child", "test-overlays", "test-override", "test-simple", "test-tc"}
	if got := bundleNames(res); !slices.Equal(got, want) {
		t.Errorf("Bundles %v, want %v", got, want)
	}
	if len(res.Errors) != 2 || res.Complete() {
		t.Errorf("errors %v, want the two of bad and remote", res.Errors)
	}
	if err := errorFor(res, "bad"); err == nil || !strings.Contains(err.Error(), `bad/fleet.yaml:4: unknown field "helm.chrt", did you mean "chart"?`) {
		t.Errorf("bad: %v, want file, line, field and the field meant", err)
	}
	if err := errorFor(res, "remote"); err == nil || !strings.Contains(err.Error(), "remote/fleet.yaml:") || !strings.Contains(err.Error(), `helm.repo: the chart "podinfo" from "https://127.0.0.1:1/charts" version "6.0.0" is fetched by the GitOps source component`) {
		t.Errorf("remote: %v, want an error naming the file and helm.repo", err)
	}

	simple := bundleNamed(t, res, "test-simple")
	if simple.APIVersion != "fleet.cattle.io/v1alpha1" || simple.Kind != "Bundle" || simple.Namespace != "ws" {
		t.Errorf("simple: %s %s in %q", simple.APIVersion, simple.Kind, simple.Namespace)
	}
	if want := map[string]string{fleet.RepoLabel: "test", fleet.CommitLabel: "abc123", "env": "test"}; !reflect.DeepEqual(simple.Labels, want) {
		t.Errorf("simple labels %v, want %v", simple.Labels, want)
	}
	if got := resourceNames(simple); !slices.Equal(got, []string{"README.md", "configmap.yaml"}) {
		t.Errorf("simple resources %v", got)
	}
	if r := simple.Spec.Resources[1]; r.Encoding != "" || !strings.Contains(r.Content, "greeting: hello") {
		t.Errorf("a text file is stored as it is: %+v", r)
	}
	if want := []fleet.BundleTarget{{Name: "default", ClusterGroup: "default"}}; !reflect.DeepEqual(simple.Spec.Targets, want) {
		t.Errorf("simple targets %+v, want the default group", simple.Spec.Targets)
	}

	named := bundleNamed(t, res, "my-bundle")
	if named.Labels["team"] != "blue" || named.Spec.DefaultNamespace != "named-ns" || slices.Contains(resourceNames(named), "fleet.yaml") {
		t.Errorf("named: labels %v, defaultNamespace %q, resources %v", named.Labels, named.Spec.DefaultNamespace, resourceNames(named))
	}

	// A path without fleet.yaml holds every file below it, those of nested
	// fleet.yaml directories too (as Fleet; the renderer leaves them out of
	// plain manifests); each fleet.yaml directory is a Bundle of its own.
	if got, want := resourceNames(bundleNamed(t, res, "test-nested")), []string{"app/child/cm.yaml", "app/child/fleet.yaml", "app/deploy.yaml", "app/fleet.yaml", "plain/cm.yaml", "top.yaml"}; !slices.Equal(got, want) {
		t.Errorf("nested resources %v, want %v", got, want)
	}
	app := bundleNamed(t, res, "test-nested-app")
	if got, want := resourceNames(app), []string{"child/cm.yaml", "child/fleet.yaml", "deploy.yaml"}; !slices.Equal(got, want) || app.Spec.TargetNamespace != "app" {
		t.Errorf("nested/app resources %v (want %v), namespace %q", got, want, app.Spec.TargetNamespace)
	}

	if got, want := resourceNames(bundleNamed(t, res, "test-ignore")), []string{"keep.yaml", "other/local.yaml", "sub/keep.yaml"}; !slices.Equal(got, want) {
		t.Errorf("ignore resources %v, want %v (*.md, skipdir/* and sub's local.yaml ignored, hidden files left out)", got, want)
	}

	tc := bundleNamed(t, res, "test-tc")
	if len(tc.Spec.Targets) != 2 {
		t.Fatalf("tc targets %+v", tc.Spec.Targets)
	}
	dev, prod := tc.Spec.Targets[0], tc.Spec.Targets[1]
	if dev.Name != "dev" || dev.ClusterSelector.MatchLabels["env"] != "dev" || dev.Helm.Values.Data["replicas"] != float64(2) || dev.Helm.Chart != "./chart" {
		t.Errorf("tc target dev %+v (helm %+v)", dev, dev.Helm)
	}
	if prod.Name != "target001" || prod.ClusterGroup != "prod" || !prod.DoNotDeploy {
		t.Errorf("tc target 1 %+v: an unnamed target is named target001", prod)
	}
	if len(tc.Spec.TargetRestrictions) != 0 {
		t.Errorf("tc restrictions %+v without GitRepo targets", tc.Spec.TargetRestrictions)
	}

	ov := bundleNamed(t, res, "test-override")
	if len(ov.Spec.Targets) != 1 || ov.Spec.Targets[0].Name != "only-edge" || len(ov.Spec.TargetRestrictions) != 1 || ov.Spec.TargetRestrictions[0].ClusterSelector.MatchLabels["tier"] != "edge" {
		t.Errorf("override: targets %+v restrictions %+v", ov.Spec.Targets, ov.Spec.TargetRestrictions)
	}

	helm := bundleNamed(t, res, "test-helm")
	wantValues := map[string]any{"color": "green", "nested": map[string]any{"keep": "inline", "over": "file"}}
	if !reflect.DeepEqual(helm.Spec.Helm.Values.Data, wantValues) || helm.Spec.Helm.ValuesFiles != nil {
		t.Errorf("helm values %v, valuesFiles %v; want the file merged over the inline values, %v, and no valuesFiles", helm.Spec.Helm.Values.Data, helm.Spec.Helm.ValuesFiles, wantValues)
	}
	if got, want := resourceNames(helm), []string{"chart/Chart.yaml", "chart/templates/cm.yaml", "chart/values.yaml"}; !slices.Equal(got, want) {
		t.Errorf("helm resources %v, want %v (no fleet.yaml, no values file)", got, want)
	}

	if k := bundleNamed(t, res, "test-kustomize"); k.Spec.Kustomize == nil || k.Spec.Kustomize.Dir != "overlays/dev" {
		t.Errorf("kustomize: %+v", k.Spec.Kustomize)
	}
	if o := bundleNamed(t, res, "test-overlays"); !slices.Contains(resourceNames(o), "overlays/dev/cm_patch.yaml") || o.Spec.Targets[0].YAML == nil {
		t.Errorf("overlays: resources %v, targets %+v", resourceNames(o), o.Spec.Targets)
	}

	// Deterministic: the same checkout reads the same Bundles.
	again := read(t, fixtures, []string{"*"}, Options{Namespace: "ws", Commit: "abc123", Labels: map[string]string{"env": "test"}})
	if !reflect.DeepEqual(again.Bundles, res.Bundles) {
		t.Error("reading the same checkout twice gave different Bundles")
	}
}

// TestRead_GitRepoOptions: the GitRepo-level options (fleet apply's
// flags) land on every Bundle as Fleet's fleet apply sets them; GitRepo
// targets come after targetCustomizations and restrict them, and
// overrideTargets replace them.
func TestRead_GitRepoOptions(t *testing.T) {
	targets, restrictions := GitRepoTargets([]fleet.BundleTargetRestriction{{Name: "edge", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}}})
	opts := Options{
		Namespace: "ws", ServiceAccount: "deployer", TargetNamespace: "forced", Paused: true, SyncGeneration: 3,
		KeepResources: true, DeleteNamespace: true, CorrectDrift: &fleet.CorrectDrift{Enabled: true, Force: true},
		Targets: targets, TargetRestrictions: restrictions,
	}
	res := read(t, fixtures, []string{"simple", "tc", "override"}, opts)
	if !res.Complete() {
		t.Fatal(res.Errors)
	}
	for _, b := range res.Bundles {
		s := b.Bundle.Spec
		if s.ServiceAccount != "deployer" || s.TargetNamespace != "forced" || !s.Paused || s.ForceSyncGeneration != 3 || !s.KeepResources || !s.DeleteNamespace || s.CorrectDrift == nil || !s.CorrectDrift.Force {
			t.Errorf("%s: GitRepo options not all set: %+v", b.Bundle.Name, s.BundleDeploymentOptions)
		}
		for _, tg := range s.Targets {
			if tg.TargetNamespace != "forced" {
				t.Errorf("%s: target %s namespace %q, want the GitRepo's targetNamespace", b.Bundle.Name, tg.Name, tg.TargetNamespace)
			}
		}
	}
	names := func(ts []fleet.BundleTarget) (out []string) {
		for _, tg := range ts {
			out = append(out, tg.Name)
		}
		return out
	}
	if got := names(bundleNamed(t, res, "test-simple").Spec.Targets); !slices.Equal(got, []string{"edge"}) {
		t.Errorf("simple targets %v, want the GitRepo's", got)
	}
	tc := bundleNamed(t, res, "test-tc")
	if got := names(tc.Spec.Targets); !slices.Equal(got, []string{"dev", "target001", "edge"}) || len(tc.Spec.TargetRestrictions) != 1 || tc.Spec.TargetRestrictions[0].Name != "edge" {
		t.Errorf("tc targets %v restrictions %+v: want the customisations, then the GitRepo's targets restricting them", got, tc.Spec.TargetRestrictions)
	}
	if got := names(bundleNamed(t, res, "test-override").Spec.Targets); !slices.Equal(got, []string{"only-edge"}) {
		t.Errorf("override targets %v: overrideTargets replace the GitRepo's", got)
	}

	// No GitRepo targets: Fleet's default group, as target and restriction.
	dt, dr := GitRepoTargets(nil)
	if len(dt) != 1 || dt[0].ClusterGroup != "default" || len(dr) != 1 || dr[0].ClusterGroup != "default" {
		t.Errorf("default GitRepo targets %+v %+v", dt, dr)
	}
	// A sync generation of 0 replaces the fleet.yaml's, as in Fleet.
	root := write(t, map[string]string{"a/fleet.yaml": "forceSyncGeneration: 7\n", "a/cm.yaml": cm})
	if b := read(t, root, []string{"a"}, Options{}).Bundles[0].Bundle; b.Spec.ForceSyncGeneration != 0 {
		t.Errorf("forceSyncGeneration %d", b.Spec.ForceSyncGeneration)
	}
}

// TestRead_FleetYAMLMistakesNameFileLineAndField: each kind of mistake in
// a fleet.yaml is its path's error with the file, the line and the field,
// and the path next to it still gives its Bundle.
func TestRead_FleetYAMLMistakesNameFileLineAndField(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		want       []string
	}{
		{"misspelt field", "namespace: x\nhelm:\n  relaseName: y\n", []string{`p/fleet.yaml:3: unknown field "helm.relaseName", did you mean "releaseName"?`}},
		{"wrong case", "defaultnamespace: x\n", []string{`p/fleet.yaml:1: unknown field "defaultnamespace", did you mean "defaultNamespace"?`}},
		{"in a target customisation", "targetCustomizations:\n- name: a\n  clusterName: x\n- name: b\n  helm:\n    valuse: {}\n", []string{`p/fleet.yaml:6: unknown field "targetCustomizations[1].helm.valuse", did you mean "values"?`}},
		{"wrong type", "helm:\n  releaseName: [1, 2]\n", []string{"p/fleet.yaml:2: helm.releaseName: wants a value of Go type string, not an array"}},
		{"not YAML", "helm:\n  values: {a: 1\n", []string{"p/fleet.yaml:", "not valid YAML"}},
		{"bad dependsOn", "dependsOn:\n- acceptedStates: [Done]\n", []string{"p/fleet.yaml:2: dependsOn[0]: give a name or a selector", `p/fleet.yaml:2: dependsOn[0].acceptedStates[0]: unknown state "Done"`}},
		{"reserved label", "labels:\n  fleet.cattle.io/repo-name: other\n", []string{`p/fleet.yaml:1: labels: label "fleet.cattle.io/repo-name" is set by fleet apply`}},
		{"bad name", "name: Not_A_Name\n", []string{`p/fleet.yaml:1: name: "Not_A_Name" is not a valid Bundle name`}},
		{"image scans", "imageScans:\n- image: x\n", []string{"p/fleet.yaml:1: imageScans: image scans are not supported"}},
		{"missing values file", "helm:\n  valuesFiles: [nope.yaml]\n", []string{`p/fleet.yaml: helm.valuesFiles[0]: "nope.yaml": no such file or directory`}},
		{"values file outside", "helm:\n  valuesFiles: [../good/cm.yaml]\n", []string{`helm.valuesFiles[0]: "../good/cm.yaml" must be a file inside p`}},
		{"local chart missing", "helm:\n  chart: ./nochart\n", []string{`p/fleet.yaml: helm.chart: "./nochart" is not in p; a chart from a repository needs helm.repo`}},
		{"local chart outside", "helm:\n  chart: ../good\n", []string{`helm.chart: "../good" must be a chart inside p`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := write(t, map[string]string{"p/fleet.yaml": tt.yaml, "p/cm.yaml": cm, "good/cm.yaml": cm})
			res := read(t, root, []string{"p", "good"}, Options{})
			err := errorFor(res, "p")
			if err == nil {
				t.Fatalf("no error for p; result %+v", res)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if got := bundleNames(res); !slices.Equal(got, []string{"test-good"}) || res.Complete() {
				t.Errorf("Bundles %v (complete %v), want test-good beside the error", got, res.Complete())
			}
		})
	}
}

// TestRead_LimitsArePerPathErrors: a file, a directory or a Bundle over
// its limit fails its own path with an error that names the limit and what
// to do; the other paths are read.
func TestRead_LimitsArePerPathErrors(t *testing.T) {
	big := strings.Repeat("x", 2000)
	for _, tt := range []struct {
		name   string
		files  map[string]string
		limits Limits
		want   string
	}{
		{"one file", map[string]string{"p/big.yaml": big}, Limits{FileBytes: 1000}, "p/big.yaml: larger than 1000 bytes, the limit of one file"},
		{"all files", map[string]string{"p/a.yaml": big, "p/b.yaml": big}, Limits{PathBytes: 3000}, "its files are larger than 3000 bytes together"},
		{"number of files", map[string]string{"p/a.yaml": cm, "p/b.yaml": cm, "p/c.yaml": cm}, Limits{Files: 2}, "more than 2 files"},
		{"the Bundle", map[string]string{"p/a.yaml": randomText(4000)}, Limits{BundleBytes: 2000}, "over the limit of 2000 bytes"},
		{"the scan", map[string]string{"p/a/fleet.yaml": "", "p/a/cm.yaml": cm, "p/b/fleet.yaml": "", "p/b/cm.yaml": cm}, Limits{ScanEntries: 3}, "more than 3 files and directories under it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.files["good/cm.yaml"] = cm
			root := write(t, tt.files)
			res := read(t, root, []string{"p", "good"}, Options{Limits: tt.limits})
			var err error
			for _, e := range res.Errors {
				if strings.HasPrefix(e.Path, "p") {
					err = e
				}
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
			if got := bundleNames(res); !slices.Equal(got, []string{"test-good"}) {
				t.Errorf("Bundles %v, want test-good", got)
			}
		})
	}
}

// randomText is text gzip cannot shrink much.
func randomText(n int) string {
	var b strings.Builder
	x := uint32(2463534242)
	for b.Len() < n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789"[x%36])
	}
	return b.String()
}

func gunzip(t *testing.T, r fleet.BundleResource) []byte {
	t.Helper()
	if r.Encoding != "base64+gz" {
		t.Fatalf("%s encoding %q, want base64+gz", r.Name, r.Encoding)
	}
	raw, err := base64.StdEncoding.DecodeString(r.Content)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestRead_EncodingAsFleet: text stays plain; a binary file is base64+gz;
// a Bundle of 1 MB or more, or --compress, stores every file base64+gz;
// all decode to the files' bytes.
func TestRead_EncodingAsFleet(t *testing.T) {
	bin := string([]byte{0x1f, 0x8b, 0xff, 0x00, 0xfe})
	root := write(t, map[string]string{"p/cm.yaml": cm, "p/logo.png": bin, "large/a.yaml": randomText(600000), "large/b.yaml": randomText(500000)})
	res := read(t, root, []string{"p", "large"}, Options{})
	p := bundleNamed(t, res, "test-p")
	if r := p.Spec.Resources[0]; r.Name != "cm.yaml" || r.Encoding != "" || r.Content != cm {
		t.Errorf("text resource %+v", r)
	}
	if r := p.Spec.Resources[1]; string(gunzip(t, r)) != bin {
		t.Errorf("binary resource does not decode to the file")
	}
	for _, r := range bundleNamed(t, res, "test-large").Spec.Resources {
		if data := gunzip(t, r); len(data) < 500000 {
			t.Errorf("%s decodes to %d bytes", r.Name, len(data))
		}
	}
	for _, r := range bundleNamed(t, read(t, root, []string{"p"}, Options{Compress: true}), "test-p").Spec.Resources {
		gunzip(t, r)
	}
}

// TestRead_SymbolicLinks: a link to a file inside the directory is read as
// that file; a link out of the directory or to a directory, a fleet.yaml or
// values file linked to outside, is its path's error (a checkout must not
// make the reader read the machine's files, nor show them in an error).
func TestRead_SymbolicLinks(t *testing.T) {
	root := write(t, map[string]string{"p/real.yaml": cm, "shared/secret.txt": "not for Bundles", "q/cm.yaml": cm, "r/cm.yaml": cm, "r/sub/x.yaml": cm})
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("real.yaml", filepath.Join(root, "p/link.yaml")))
	must(os.Symlink("../shared/secret.txt", filepath.Join(root, "q/out.txt")))
	must(os.Symlink(filepath.Join(root, "shared/secret.txt"), filepath.Join(root, "q/abs.txt")))
	must(os.Symlink("sub", filepath.Join(root, "r/dirlink")))
	must(os.MkdirAll(filepath.Join(root, "s"), 0o755))
	must(os.Symlink("../shared/secret.txt", filepath.Join(root, "s/fleet.yaml")))
	must(os.MkdirAll(filepath.Join(root, "u"), 0o755))
	must(os.WriteFile(filepath.Join(root, "u/fleet.yaml"), []byte("helm:\n  valuesFiles: [v.yaml]\n"), 0o644))
	must(os.Symlink("../shared/secret.txt", filepath.Join(root, "u/v.yaml")))
	res := read(t, root, []string{"p", "q", "r", "s", "u"}, Options{})
	p := bundleNamed(t, res, "test-p")
	if got := resourceNames(p); !slices.Equal(got, []string{"link.yaml", "real.yaml"}) || p.Spec.Resources[0].Content != cm {
		t.Errorf("p resources %v", got)
	}
	if err := errorFor(res, "q"); err == nil || !strings.Contains(err.Error(), "symbolic link to outside the Bundle's directory") {
		t.Errorf("q: %v", err)
	}
	if err := errorFor(res, "r"); err == nil || !strings.Contains(err.Error(), "r/dirlink: symbolic link to a directory") {
		t.Errorf("r: %v", err)
	}
	if err := errorFor(res, "s"); err == nil || !strings.Contains(err.Error(), "s/fleet.yaml is a symbolic link to outside s") {
		t.Errorf("s: %v", err)
	}
	if err := errorFor(res, "u"); err == nil || !strings.Contains(err.Error(), "u/v.yaml is a symbolic link to outside u") {
		t.Errorf("u: %v", err)
	}
	for _, e := range res.Errors {
		if strings.Contains(e.Error(), "not for Bundles") {
			t.Errorf("an error shows a file from outside: %v", e)
		}
	}
	for _, b := range res.Bundles {
		for _, r := range b.Bundle.Spec.Resources {
			if strings.Contains(r.Content, "not for Bundles") {
				t.Errorf("%s holds a file from outside its directory", b.Bundle.Name)
			}
		}
	}
}

// fetcher is a ChartFetcher serving charts from memory, recording what it
// was asked (the real one, gitops/charts, is tested against real servers).
type fetcher struct {
	asked []ChartRef
	fail  error
}

func (f *fetcher) FetchChart(_ context.Context, ref ChartRef) (*Chart, error) {
	f.asked = append(f.asked, ref)
	if f.fail != nil {
		return nil, f.fail
	}
	return &Chart{Digest: "sha256:" + ref.Version, Files: map[string][]byte{
		ref.Chart + "/Chart.yaml":        []byte("apiVersion: v2\nname: " + ref.Chart + "\nversion: " + ref.Version + "\n"),
		ref.Chart + "/templates/cm.yaml": []byte(cm),
	}}, nil
}

// TestRead_RemoteChartsThroughTheFetcher: a chart from a repository is
// fetched once per (chart, repo, version) and embedded where Fleet's agent
// looks for it; a target's own version is a second chart; its digest is
// reported; a fetch failure is the path's error naming the field and chart.
func TestRead_RemoteChartsThroughTheFetcher(t *testing.T) {
	f := &fetcher{}
	root := write(t, map[string]string{"p/fleet.yaml": `helm:
  repo: https://charts.example.com
  chart: podinfo
  version: 6.0.0
targetCustomizations:
- name: a
  clusterName: a
  helm:
    values: {x: 1}
- name: b
  clusterName: b
  helm:
    version: 6.1.0
`})
	res := read(t, root, []string{"p"}, Options{Charts: f})
	if !res.Complete() {
		t.Fatal(res.Errors)
	}
	if len(f.asked) != 2 || f.asked[0] != (ChartRef{Path: "p", Field: "helm", Chart: "podinfo", Repo: "https://charts.example.com", Version: "6.0.0"}) || f.asked[1].Version != "6.1.0" || f.asked[1].Field != "targetCustomizations[1].helm" {
		t.Errorf("fetched %+v, want the Bundle's chart once and target b's version", f.asked)
	}
	b := res.Bundles[0]
	if !slices.Equal(b.ChartDigests, []string{"sha256:6.0.0", "sha256:6.1.0"}) {
		t.Errorf("digests %v", b.ChartDigests)
	}
	prefix := chartPrefix(&fleet.HelmOptions{Chart: "podinfo", Repo: "https://charts.example.com", Version: "6.0.0"})
	if !slices.Contains(resourceNames(b.Bundle), prefix+"/podinfo/Chart.yaml") {
		t.Errorf("resources %v lack %s/podinfo/Chart.yaml", resourceNames(b.Bundle), prefix)
	}
	if h := b.Bundle.Spec.Targets[0].Helm; h.Repo != "https://charts.example.com" || h.Chart != "podinfo" || h.Version != "6.0.0" {
		t.Errorf("target a's helm %+v: takes the Bundle's chart, repo and version", h)
	}

	res = read(t, root, []string{"p"}, Options{Charts: &fetcher{fail: errors.New("404 Not Found from https://charts.example.com/index.yaml")}})
	if err := errorFor(res, "p"); err == nil || !strings.Contains(err.Error(), `p/fleet.yaml: helm.repo: fetching the chart "podinfo" from "https://charts.example.com" version "6.0.0": 404`) {
		t.Errorf("fetch failure: %v", err)
	}
	root = write(t, map[string]string{"p/fleet.yaml": "helm:\n  chart: oci://registry.example.com/charts/app\n"})
	if err := errorFor(read(t, root, []string{"p"}, Options{}), "p"); err == nil || !strings.Contains(err.Error(), `helm.chart: the chart "oci://registry.example.com/charts/app" is fetched by the GitOps source component`) {
		t.Errorf("oci chart without fetcher: %v", err)
	}
}

// TestRead_PathsThatCannotBeReadKeepTheResultIncomplete: a path matching
// no directory, a path out of the repository, two directories claiming one
// Bundle name, and a checkout with nothing to deploy are errors, so the
// result is incomplete and nothing gets pruned; overlapping paths read a
// directory once.
func TestRead_PathsThatCannotBeReadKeepTheResultIncomplete(t *testing.T) {
	root := write(t, map[string]string{"a/fleet.yaml": "name: same\n", "a/cm.yaml": cm, "b/fleet.yaml": "name: same\n", "b/cm.yaml": cm, "c/sub/fleet.yaml": "", "c/sub/cm.yaml": cm})
	res := read(t, root, []string{"a", "b", "c", "c/sub", "missing", "../etc"}, Options{})
	if got := bundleNames(res); !slices.Equal(got, []string{"same", "test-c-sub"}) {
		t.Errorf("Bundles %v", got)
	}
	for path, want := range map[string]string{
		"b":       `its Bundle name "same" is also the Bundle of a`,
		"missing": "matches no directory",
		"../etc":  "a path must stay inside the repository",
	} {
		if err := errorFor(res, path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
	empty := write(t, map[string]string{"docs/README.md": "nothing to deploy"})
	res = read(t, empty, nil, Options{})
	if res.Complete() || len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), "no resources found to deploy") {
		t.Errorf("empty checkout: %v", res.Errors)
	}
	// A directory whose files are all left out has no Bundle and no error.
	res = read(t, write(t, map[string]string{"x/fleet.yaml": "", "x/.fleetignore": "*\n", "x/cm.yaml": cm, "y/cm.yaml": cm}), []string{"x", "y"}, Options{})
	if !res.Complete() || !slices.Equal(res.Empty, []string{"x"}) {
		t.Errorf("all ignored: errors %v empty %v", res.Errors, res.Empty)
	}
}

// TestReadTargetsFile: Fleet's targets file (what its GitRepo controller
// writes, JSON) is read; a mistake names the field.
func TestReadTargetsFile(t *testing.T) {
	tf, err := ReadTargetsFile("targets.json", []byte(`{"targets":[{"name":"dev","clusterSelector":{"matchLabels":{"env":"dev"}}}],"targetRestrictions":[{"name":"dev","clusterSelector":{"matchLabels":{"env":"dev"}}}]}`))
	if err != nil || len(tf.Targets) != 1 || len(tf.TargetRestrictions) != 1 || tf.Targets[0].ClusterSelector.MatchLabels["env"] != "dev" {
		t.Fatalf("%+v %v", tf, err)
	}
	_, err = ReadTargetsFile("targets.yaml", []byte("targets:\n- name: dev\n  clustrName: x\n"))
	if err == nil || !strings.Contains(err.Error(), `targets.yaml:3: unknown field "targets[0].clustrName", did you mean "clusterName"?`) {
		t.Errorf("%v", err)
	}
}
