package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/manifest"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/scheme"
	"github.com/gitops-fleet/fleet/review"
)

const liveCluster = `apiVersion: fleet.cattle.io/v1alpha1
kind: Cluster
metadata:
  name: dev-1
  namespace: fleet-default
  labels: {env: dev}
spec: {}
`

// liveBundle is Bundle web as `fleet apply` writes it: two ConfigMaps, and
// with comparePatches, Fleet's two kinds of them: data.owner of settings left
// out of the comparison (jsonPointers), a missing optional not drift
// (operation ignore).
func liveBundle(comparePatches bool) string {
	b := `apiVersion: fleet.cattle.io/v1alpha1
kind: Bundle
metadata:
  name: web
  namespace: fleet-default
spec:
  correctDrift: {}
  ignore: {}
  defaultNamespace: web
  resources:
  - name: settings.yaml
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: settings
      data:
        color: blue
        owner: fleet
  - name: optional.yaml
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: optional
      data:
        feature: "on"
  targets:
  - name: dev
    clusterSelector:
      matchLabels: {env: dev}
    correctDrift: {}
    ignore: {}
`
	if comparePatches {
		b += `  diff:
    comparePatches:
    - apiVersion: v1
      kind: ConfigMap
      name: settings
      namespace: web
      jsonPointers: [/data/owner]
    - apiVersion: v1
      kind: ConfigMap
      name: optional
      namespace: web
      operations: [{op: ignore}]
`
	}
	return b
}

// TestDiffLive_BundleComparePatchesAreNotChanges: `fleet diff --live`
// dry-runs a Bundle that a change adds on the cluster it targets (a real API
// server standing for dev-1) and compares as the agent's drift check does:
// deployed as rendered, nothing changes; a field changed downstream that the
// Bundle's comparePatches leave out is said to be left out, not a change,
// while the same Bundle without comparePatches shows it as configured,
// naming the field; a field they do not name is a change either way; a
// missing object an ignore operation names is not a change, without it it
// is created. The CLI asks for the Bundles too (through the cluster proxy:
// here an upstream without one, which the report says).
func TestDiffLive_BundleComparePatchesAreNotChanges(t *testing.T) {
	env := testenv.StartControlPlanes(t, controlplane.Options{NoControllerManager: true, ManifestDirs: []string{}})
	cfg := env.Upstream.Config
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	base := filepath.Dir(writeFile(t, dir, "base/cluster.yaml", liveCluster))
	withPatches := filepath.Dir(writeFile(t, dir, "head/cluster.yaml", liveCluster))
	writeFile(t, dir, "head/bundle.yaml", liveBundle(true))
	without := filepath.Dir(writeFile(t, dir, "plain/cluster.yaml", liveCluster))
	writeFile(t, dir, "plain/bundle.yaml", liveBundle(false))

	load := func(d string) *review.Tree {
		tree, err := review.Load(d, filepath.Base(d), "")
		if err != nil {
			t.Fatal(err)
		}
		return tree
	}
	live := func(head string) []string {
		t.Helper()
		h := load(head)
		r, err := review.Diff(load(base), h)
		if err != nil {
			t.Fatal(err)
		}
		r.LiveBundles(t.Context(), func(ws, name string) (*rest.Config, error) { return cfg, nil }, bundleRenderer(h, rolloutFlags{}))
		if len(r.Clusters) != 1 || len(r.Clusters[0].BundlesLive) != 1 {
			t.Fatalf("want one cluster with one Bundle dry-run: %+v", r.Clusters)
		}
		bl := r.Clusters[0].BundlesLive[0]
		if bl.Bundle != "web" || bl.Error != "" {
			t.Fatalf("live Bundle %+v", bl)
		}
		return bl.Lines
	}
	expect := func(what string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: live %q, want %q", what, got, want)
		}
	}

	// Deploy the head's Bundle as the agent does: rendered, in its
	// namespace, under its owner labels, with server-side apply.
	h := load(withPatches)
	content, _, err := bundleRenderer(h, rolloutFlags{})(t.Context(), h.Bundles["fleet-default/web"], h.Clusters["fleet-default/dev-1"])
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(content)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		o.SetNamespace("web")
	}
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	m := apply.NewManager(c)
	m.SetOwnerLabels(objs, "web", names.ClusterNamespace("fleet-default", "dev-1"))
	if _, err := m.ApplyAllStaged(t.Context(), objs, ssa.DefaultApplyOptions()); err != nil {
		t.Fatal(err)
	}
	expect("deployed as rendered", live(withPatches), review.NothingChanges)
	expect("deployed as rendered, no comparePatches", live(without), review.NothingChanges)

	edit := func(name string, data map[string]string) {
		t.Helper()
		cm := &corev1.ConfigMap{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: "web", Name: name}, cm); err != nil {
			t.Fatal(err)
		}
		for k, v := range data {
			cm.Data[k] = v
		}
		if err := c.Update(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}
	// Another manager (a controller downstream) owns data.owner now.
	edit("settings", map[string]string{"owner": "someone-else"})
	expect("a field comparePatches leave out changed", live(withPatches),
		"ConfigMap web/settings: unchanged; it differs only in what diff.comparePatches leave out")
	expect("the same change without comparePatches", live(without),
		"ConfigMap web/settings: configured (changed data.owner)")

	edit("settings", map[string]string{"color": "red"})
	expect("a field comparePatches do not name changed", live(withPatches),
		"ConfigMap web/settings: configured (changed data.color)")

	if err := c.Delete(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "optional"}}); err != nil {
		t.Fatal(err)
	}
	// In the rendered order (the resources' names: optional.yaml first).
	expect("optional deleted", live(withPatches),
		"ConfigMap web/optional: missing; not a change: diff.comparePatches ignore it",
		"ConfigMap web/settings: configured (changed data.color)")
	expect("optional deleted, no comparePatches", live(without),
		"ConfigMap web/optional: created",
		"ConfigMap web/settings: configured (changed data.color, data.owner)")

	// The command asks for the Bundles with --live: through the upstream's
	// cluster proxy, which this upstream does not serve.
	kc := writeFile(t, dir, "kubeconfig", string(env.Upstream.Kubeconfig))
	out, err := runCLI(t, "diff", "--base", base, "--head", withPatches, "--live", "--kubeconfig", kc)
	if code := exitCode(err); code != exitFailed {
		t.Fatalf("fleet diff --live: exit %d (%v), want %d (the change adds a Bundle)\n%s", code, err, exitFailed, out)
	}
	if !strings.Contains(string(out), "live:    Bundle web: could not ask the cluster") {
		t.Errorf("fleet diff --live does not report the Bundle's dry run:\n%s", out)
	}
}
