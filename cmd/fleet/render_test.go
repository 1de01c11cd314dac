package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/renderer"
)

// runCLI runs the fleet command in-process and returns its standard output.
func runCLI(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.Bytes(), err
}

func helmBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	p, _ := filepath.Abs("../../bin/helm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the helm CLI is needed: run `make helm` (or `make test`, which installs it)")
	}
	return p
}

// TestRenderAgent_ValuesThroughHelmTemplateGiveTheSameManifests is the
// reviewability promise: a reviewer who runs helm template with the values
// `fleet render agent` prints sees byte for byte what the controller applies.
func TestRenderAgent_ValuesThroughHelmTemplateGiveTheSameManifests(t *testing.T) {
	helm := helmBinary(t)
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
				cmd := exec.Command(helm, "template", "fleet-agent", "../../charts/fleet-agent", "-n", v.Internal.SystemNamespace, "-f", vf)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				helmOut, err := cmd.Output()
				if err != nil {
					t.Fatalf("helm template: %v: %s", err, stderr.String())
				}
				if !bytes.Equal(helmOut, manifests) {
					t.Errorf("helm template output differs from fleet render agent --output manifests\n--- helm\n%s\n--- fleet\n%s", helmOut, manifests)
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
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"render", "agent", "--cluster", notCluster}, "want kind Cluster"},
		{[]string{"render", "agent", "--cluster", typo}, `unknown field "spec.kubeconfigSecret"`},
		{[]string{"render", "agent", "--cluster", good}, "set apiServerURL in the fleet-controller config"},
		{[]string{"render", "agent", "--cluster", good, "--config", badCfg}, `agentTLSMode "lax" must be`},
		{[]string{"render", "agent", "--cluster", good, "--output", "json"}, "--output must be values or manifests"},
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
	const bundleFile, clusterFile = "../../examples/gitops/bundles/hello.yaml", "../../examples/gitops/clusters/more/prod-eu.yaml"
	got, err := runCLI(t, "render", "bundle", "--bundle", bundleFile, "--cluster", clusterFile)
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
	want, err := renderer.RenderBundle(b, c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.YAML) || len(got) == 0 {
		t.Errorf("fleet render bundle printed\n%s\nthe renderer renders\n%s", got, want.YAML)
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
