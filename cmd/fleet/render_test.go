package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/targeting"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/bundlefiles"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

// runCLI runs the fleet command in-process and returns its standard output.
func runCLI(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	out, _, err := runCLIStderr(t, args...)
	return out, err
}

// runCLIStderr runs the fleet command in-process, as main does, and returns
// its standard output and standard error; an error is an *exitError.
func runCLIStderr(t *testing.T, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err = run(t.Context(), cmd, args)
	return out.Bytes(), errOut.Bytes(), err
}

// TestRenderAgent_ValuesThroughHelmTemplateGiveTheSameManifests is the
// reviewability promise: a reviewer who runs helm template with the values
// `fleet render agent` prints sees byte for byte what the controller applies,
// with a Helm 4 CLI and with a Helm 3 CLI (no --kube-version: the agent chart
// reads no Capabilities, and this keeps it so).
func TestRenderAgent_ValuesThroughHelmTemplateGiveTheSameManifests(t *testing.T) {
	clis := renderertest.HelmCLIs(t)
	sets := []struct{ glob, config string }{
		{"../../examples/*/clusters/*.yaml", "../../examples/gitops/config/fleet-controller.yaml"},
		{"../../renderer/testdata/clusters/*.yaml", "../../renderer/testdata/config.yaml"},
	}
	n := 0
	for _, set := range sets {
		files, _ := filepath.Glob(set.glob)
		for _, f := range files {
			n++
			t.Run(filepath.Base(filepath.Dir(filepath.Dir(f)))+"/"+filepath.Base(f), func(t *testing.T) {
				values, err := runCLI(t, "render", "agent", "--cluster", f, "--config", set.config, "--output", "values")
				if err != nil {
					t.Fatal(err)
				}
				manifests, err := runCLI(t, "render", "agent", "--cluster", f, "--config", set.config, "--output", "manifests")
				if err != nil {
					t.Fatal(err)
				}
				var v struct {
					Internal struct {
						SystemNamespace string `json:"systemNamespace"`
					} `json:"internal"`
				}
				if err := yaml.Unmarshal(values, &v); err != nil {
					t.Fatal(err)
				}
				vf := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(vf, values, 0o600); err != nil {
					t.Fatal(err)
				}
				for _, h := range clis {
					t.Run(h.Name, func(t *testing.T) {
						cmd := h.Command(t, "template", "fleet-agent", "../../charts/fleet-agent", "-n", v.Internal.SystemNamespace, "-f", vf)
						var stderr bytes.Buffer
						cmd.Stderr = &stderr
						helmOut, err := cmd.Output()
						if err != nil {
							t.Fatalf("%s template: %v: %s", h.Name, err, stderr.String())
						}
						if !bytes.Equal(helmOut, manifests) {
							t.Errorf("%s template output differs from fleet render agent --output manifests\n--- %s\n%s\n--- fleet\n%s", h.Name, h.Name, helmOut, manifests)
						}
					})
				}
			})
		}
	}
	if n < 10 {
		t.Fatalf("only %d clusters compared; want the examples and at least 8 customised specs", n)
	}
}

func TestRenderAgent_ClearErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notCluster := write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
	typo := write("typo.yaml", "apiVersion: fleet.cattle.io/v1alpha1\nkind: Cluster\nmetadata: {name: x}\nspec: {kubeconfigSecret: x}\n")
	good := write("good.yaml", "apiVersion: fleet.cattle.io/v1alpha1\nkind: Cluster\nmetadata: {name: x}\nspec: {kubeConfigSecret: x}\n")
	badCfg := write("cfg.yaml", "agentTLSMode: lax\n")
	// A canary selected on a key agents may set (agentLabelKeys empty:
	// any key outside the reserved prefixes).
	agentCanary := write("canary.yaml", "agentRollout: {canary: {selector: {matchLabels: {canary: \"true\"}}}}\n")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"render", "agent", "--cluster", notCluster}, "document 1 is a ConfigMap, not a Cluster of fleet.cattle.io/v1alpha1"},
		{[]string{"render", "agent", "--cluster", typo}, `unknown field "spec.kubeconfigSecret", did you mean "kubeConfigSecret"?`},
		{[]string{"render", "agent", "--cluster", good}, "no upstream API server URL for the agent: give the controller configuration with --config FILE"},
		{[]string{"render", "agent", "--cluster", good, "--config", write("nourl.yaml", "agentTLSMode: strict\n")}, "set apiServerURL in the fleet-controller config"},
		{[]string{"render", "agent", "--cluster", good, "--config", badCfg}, `agentTLSMode "lax" must be`},
		{[]string{"render", "agent", "--cluster", good, "--config", agentCanary}, `agentRollout.canary.selector uses label key "canary", which agents may set`},
		{[]string{"render", "agent", "--cluster", good, "--output", "json"}, "--output must be values (the values file, YAML) or manifests"},
	}
	for _, tc := range cases {
		_, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestRenderBundle_WorkerRendersWhatTheRendererRenders: `fleet render bundle`
// renders in a worker, as the controller does; the output is the renderer's.
func TestRenderBundle_WorkerRendersWhatTheRendererRenders(t *testing.T) {
	const bundleFile, clusterFile, groupFile = "../../examples/gitops/bundles/hello.yaml", "../../examples/gitops/clusters/more/prod-eu.yaml", "../../examples/gitops/clustergroups/dev.yaml"
	got, err := runCLI(t, "render", "bundle", "--bundle", bundleFile, "--cluster", clusterFile, "--group", groupFile)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bundleFile)
	if err != nil {
		t.Fatal(err)
	}
	b := &fleet.Bundle{}
	if err := yaml.Unmarshal(data, b); err != nil {
		t.Fatal(err)
	}
	c, err := readCluster(clusterFile)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := readClusterGroups(groupFile)
	if err != nil {
		t.Fatal(err)
	}
	want, err := renderer.RenderBundle(b, c, groups)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.YAML) || len(got) == 0 {
		t.Errorf("fleet render bundle printed\n%s\nthe renderer renders\n%s", got, want.YAML)
	}
	// edge-042 (env=edge) is in no target: nothing, and a note saying so.
	got, stderr, err := runCLIStderr(t, "render", "bundle", "--bundle", bundleFile, "--cluster", "../../examples/gitops/clusters/more/edge-042.yaml", "--group", groupFile)
	if err != nil || len(got) != 0 || !strings.Contains(string(stderr), "the controller deploys nothing to it") {
		t.Errorf("edge-042: err %v, stdout %q, stderr %q", err, got, stderr)
	}
}

// TestRenderBundle_HostileBundlesGetTheControllersErrors: the limits of the
// controller configuration apply, and the error names the reason.
func TestRenderBundle_HostileBundlesGetTheControllersErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	remote := write("remote.yaml", `apiVersion: fleet.cattle.io/v1alpha1
kind: Bundle
metadata: {name: remote}
spec:
  kustomize: {dir: overlay}
  resources:
  - name: overlay/kustomization.yaml
    content: |
      resources:
      - github.com/org/repo//deploy?ref=v1
`)
	loop := write("loop.yaml", `apiVersion: fleet.cattle.io/v1alpha1
kind: Bundle
metadata: {name: loop}
spec:
  helm: {chart: chart}
  resources:
  - {name: chart/Chart.yaml, content: "{apiVersion: v2, name: loop, version: 0.1.0}"}
  - name: chart/templates/loop.yaml
    content: "{{ range until 3000 }}{{ range until 3000 }}{{ range until 3000 }}{{ end }}{{ end }}{{ end }}"
`)
	cfg := write("config.yaml", "bundleRenderTimeout: 2s\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bundle", remote}, `overlay/kustomization.yaml resources[0] "github.com/org/repo//deploy?ref=v1" is a remote resource; Bundles may only use their own files (RemoteResourceRefused)`},
		{[]string{"--bundle", loop, "--config", cfg}, "rendering took longer than 2s, the limit (bundleRenderTimeout)"},
	} {
		_, err := runCLI(t, append([]string{"render", "bundle"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

const mixedTarget = "../../internal/targeting/testdata/mixed-target/"

// TestRenderBundle_MixedTargetShowsWhatTheControllerDeploys: a Bundle whose
// first target needs both a cluster selector and a ClusterGroup renders in
// `fleet render bundle` exactly what the controller deploys, for a cluster
// inside the group (the first target), one outside it (the second target)
// and one no target selects (nothing). The controller's side is its own
// decision, renderer.OptionsFor over every group of the workspace;
// controller/bundle_test.go checks the BundleDeployments the running
// controller writes for the same files against the same renders.
func TestRenderBundle_MixedTargetShowsWhatTheControllerDeploys(t *testing.T) {
	data, err := os.ReadFile(mixedTarget + "bundle.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b := &fleet.Bundle{}
	if err := yaml.UnmarshalStrict(data, b); err != nil {
		t.Fatal(err)
	}
	groups, err := readClusterGroups(mixedTarget + "groups.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files, err := bundlefiles.Decode(b.Spec.Resources)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cluster, target, replicas string // target "": none, nothing deployed
	}{
		{"prod-eu", "eu-prod", `replicas: "3"`},
		{"prod-us", "prod", `replicas: "1"`},
		{"dev-eu", "", ""},
	} {
		t.Run(tc.cluster, func(t *testing.T) {
			clusterFile := mixedTarget + tc.cluster + ".yaml"
			c, err := readCluster(clusterFile)
			if err != nil {
				t.Fatal(err)
			}
			got, stderr, err := runCLIStderr(t, "render", "bundle", "--bundle", mixedTarget+"bundle.yaml", "--cluster", clusterFile, "--group", mixedTarget+"groups.yaml")
			if err != nil {
				t.Fatal(err)
			}

			// What the controller decides for this cluster.
			opts, target, err := renderer.OptionsFor(b, c, targeting.Groups{Items: groups})
			if err != nil {
				t.Fatal(err)
			}
			if tc.target == "" {
				if target != nil {
					t.Fatalf("the controller selects %s by target %s", tc.cluster, target.Name)
				}
				if len(got) != 0 || !strings.Contains(string(stderr), "no target of Bundle web selects cluster "+tc.cluster) {
					t.Errorf("a cluster the controller deploys nothing to: stdout %q, stderr %q", got, stderr)
				}
				return
			}
			if target == nil || target.Name != tc.target {
				t.Fatalf("the controller selects %s by %+v, want target %s", tc.cluster, target, tc.target)
			}
			want, err := renderer.RenderFiles(b.Name, files, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.YAML) || !strings.Contains(string(got), tc.replicas) {
				t.Errorf("fleet render bundle printed\n%s\nthe controller deploys (%s)\n%s", got, tc.replicas, want.YAML)
			}
			inProcess, err := renderer.RenderBundle(b, c, groups)
			if err != nil || !bytes.Equal(inProcess.YAML, got) {
				t.Errorf("renderer.RenderBundle differs from fleet render bundle (%v)", err)
			}
		})
	}
}

// TestRenderBundle_TargetsNeedingGroupsNotGivenFailClearly: without the
// ClusterGroups a target consults, fleet render bundle says which group to
// give instead of guessing; bad group files are refused with the reason.
func TestRenderBundle_TargetsNeedingGroupsNotGivenFailClearly(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	otherWorkspace := write("other.yaml", "apiVersion: fleet.cattle.io/v1alpha1\nkind: ClusterGroup\nmetadata: {name: eu, namespace: elsewhere}\nspec: {selector: {}}\n")
	notGroup := write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: eu}\n")
	typo := write("typo.yaml", "apiVersion: fleet.cattle.io/v1alpha1\nkind: ClusterGroup\nmetadata: {name: eu}\nspec: {selektor: {}}\n")
	typoName := write("ue.yaml", "apiVersion: fleet.cattle.io/v1alpha1\nkind: ClusterGroup\nmetadata: {name: ue}\nspec: {selector: {}}\n")
	onlyUS := write("us.yaml", "apiVersion: fleet.cattle.io/v1alpha1\nkind: ClusterGroup\nmetadata: {name: us}\nspec: {selector: {}}\n")
	bundle, prodEU := mixedTarget+"bundle.yaml", mixedTarget+"prod-eu.yaml"
	for _, tc := range []struct {
		groups []string
		want   string
	}{
		{nil, "spec.targets[0] needs ClusterGroup eu to decide whether it selects the cluster: give its YAML (--group FILE)"},
		{[]string{onlyUS}, "spec.targets[0] needs ClusterGroup eu"},
		{[]string{otherWorkspace}, "ClusterGroup eu is in workspace elsewhere, Bundle web in fleet-default"},
		{[]string{notGroup}, "document 1 is a ConfigMap, not a ClusterGroup of fleet.cattle.io/v1alpha1"},
		{[]string{typo}, `unknown field "spec.selektor", did you mean "selector"?`},
		{[]string{onlyUS, typoName}, `the ClusterGroups given are us, ue: is clusterGroup "eu" (spec.targets[0]) a typo of "ue"?`},
		{[]string{mixedTarget + "groups.yaml", mixedTarget + "groups.yaml"}, "ClusterGroup eu is given twice"},
	} {
		args := []string{"render", "bundle", "--bundle", bundle, "--cluster", prodEU}
		for _, g := range tc.groups {
			args = append(args, "--group", g)
		}
		out, err := runCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("groups %v: got %v, want an error containing %q", tc.groups, err, tc.want)
		}
		if len(out) != 0 {
			t.Errorf("groups %v: printed manifests although it failed:\n%s", tc.groups, out)
		}
	}
	// A cluster a name or selector rules out needs no group: dev-eu is not
	// env=prod, so no target needs eu to decide.
	if _, err := runCLI(t, "render", "bundle", "--bundle", bundle, "--cluster", mixedTarget+"dev-eu.yaml"); err != nil {
		t.Errorf("dev-eu without groups: %v", err)
	}
}
