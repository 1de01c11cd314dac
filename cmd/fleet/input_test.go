package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestRenderInputs_CheckedForTheirKind: each input file is checked for the
// kind it must hold, and a wrong one says what it is ("document 1 is a
// Bundle, not a Cluster") instead of listing the fields it does not know;
// the Cluster is found among a file's documents wherever it is (its
// kubeconfig Secret first is fine); several are refused; a misspelt field
// names the document and the object.
func TestRenderInputs_CheckedForTheirKind(t *testing.T) {
	dir := t.TempDir()
	cfg := "../../examples/gitops/config/fleet-controller.yaml"
	devOne, err := os.ReadFile("../../examples/gitops/clusters/dev-1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cluster, secret, _ := strings.Cut(string(devOne), "\n---\n")
	secretFirst := writeFile(t, dir, "secret-first.yaml", secret+"\n---\n"+cluster)
	twoClusters := writeFile(t, dir, "two.yaml", cluster+"\n---\n"+secret+"\n---\n"+strings.Replace(cluster, "name: dev-1", "name: dev-2", 1))
	capi := writeFile(t, dir, "capi.yaml", "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: dev-1}\n")
	typo := writeFile(t, dir, "typo.yaml", secret+"\n---\n"+strings.Replace(cluster, "clientID: dev-1", "clientId: dev-1", 1))
	empty := writeFile(t, dir, "empty.yaml", "# nothing yet\n---\n")

	want, err := runCLI(t, "render", "agent", "--cluster", "../../examples/gitops/clusters/dev-1.yaml", "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := runCLI(t, "render", "agent", "--cluster", secretFirst, "--config", cfg); err != nil || string(got) != string(want) {
		t.Errorf("the Secret before the Cluster: %v; want the same manifests as with the Cluster first", err)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"render", "agent", "--cluster", "../../examples/gitops/bundles/hello.yaml", "--config", cfg},
			"../../examples/gitops/bundles/hello.yaml: document 1 is a Bundle, not a Cluster of fleet.cattle.io/v1alpha1"},
		{[]string{"render", "agent", "--token", "../../examples/gitops/clusters/dev-1.yaml", "--config", cfg},
			"../../examples/gitops/clusters/dev-1.yaml holds no ClusterRegistrationToken of fleet.cattle.io/v1alpha1: document 1 is a Cluster, document 2 is a Secret"},
		{[]string{"render", "bundle", "--bundle", "../../examples/gitops/clusters/dev-1.yaml"},
			"holds no Bundle of fleet.cattle.io/v1alpha1: document 1 is a Cluster, document 2 is a Secret"},
		{[]string{"render", "bundle", "--bundle", "../../examples/gitops/bundles/hello.yaml", "--cluster", "../../examples/gitops/clusters/more/prod-eu.yaml", "--group", "../../examples/gitops/clusters/dev-1.yaml"},
			"../../examples/gitops/clusters/dev-1.yaml: document 1 is a Cluster, not a ClusterGroup of fleet.cattle.io/v1alpha1"},
		{[]string{"render", "agent", "--cluster", twoClusters, "--config", cfg}, "holds 2 Clusters (documents 1, 3): give a file with one"},
		{[]string{"render", "agent", "--cluster", capi, "--config", cfg}, "document 1 is a Cluster of cluster.x-k8s.io/v1beta1, not a Cluster of fleet.cattle.io/v1alpha1"},
		{[]string{"render", "agent", "--cluster", typo, "--config", cfg}, `typo.yaml, document 2 (Cluster fleet-default/dev-1): unknown field "spec.clientId", did you mean "clientID"?`},
		{[]string{"render", "agent", "--cluster", empty, "--config", cfg}, "empty.yaml holds no YAML document: want a Cluster"},
	} {
		code, stdout, stderr := runMain(t, tt.args...)
		if code != 1 || !strings.Contains(stderr, tt.want) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tt.args[1:], code, stderr, tt.want)
		}
		if strings.Contains(stderr, "unknown field") && !strings.Contains(tt.want, "unknown field") {
			t.Errorf("%v: %q lists fields of the wrong kind", tt.args[1:], stderr)
		}
	}
}

// TestRenderAgent_ConfigMistakesSayWhatToGive: the chart's values given as
// --config are recognised as such, with how to get the ConfigMap; a missing
// --config file is named once; no apiServerURL without --config names the
// flag and the example file, for a Cluster and for a token.
func TestRenderAgent_ConfigMistakesSayWhatToGive(t *testing.T) {
	prodEU := "../../examples/gitops/clusters/more/prod-eu.yaml"
	for _, tt := range []struct {
		args []string
		want []string
		not  string
	}{
		{[]string{"--cluster", prodEU, "--config", "../../charts/fleet/values.yaml"},
			[]string{"this looks like the values of charts/fleet", "not the controller configuration", "kubectl -n cattle-fleet-system get configmap fleet-controller -o yaml",
				"helm template fleet charts/fleet -n cattle-fleet-system -f ../../charts/fleet/values.yaml --show-only templates/configmap.yaml"}, "unknown field"},
		{[]string{"--cluster", prodEU, "--config", "missing.yaml"}, []string{"--config: open missing.yaml: no such file or directory"}, ""},
		{[]string{"--cluster", prodEU}, []string{"no upstream API server URL for the agent: give the controller configuration with --config FILE", "examples/gitops/config/fleet-controller.yaml"}, ""},
		{[]string{"--token", "../../examples/gitops/tokens/dev-token.yaml", "-o", "values"}, []string{"no upstream API server URL for the agent: give the controller configuration with --config FILE"}, ""},
		{[]string{"--token", "../../examples/gitops/tokens/dev-token.yaml"}, []string{"--config FILE"}, "helm"},
	} {
		code, stdout, stderr := runMain(t, append([]string{"render", "agent"}, tt.args...)...)
		if code != 1 || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q; want 1 and nothing", tt.args, code, stdout)
		}
		for _, w := range tt.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr %q lacks %q", tt.args, stderr, w)
			}
		}
		if tt.not != "" && strings.Contains(stderr, tt.not) {
			t.Errorf("%v: stderr %q has %q", tt.args, stderr, tt.not)
		}
	}
	if _, _, stderr := runMain(t, "render", "agent", "--cluster", prodEU, "--config", "missing.yaml"); strings.Count(stderr, "missing.yaml") != 1 {
		t.Errorf("stderr %q: want the file named once", stderr)
	}
}

// TestRenderBundle_OutputJSON: -o json prints the manifests -o yaml prints
// as one v1 List.
func TestRenderBundle_OutputJSON(t *testing.T) {
	args := []string{"render", "bundle", "--bundle", mixedTarget + "bundle.yaml", "--cluster", mixedTarget + "prod-eu.yaml", "--group", mixedTarget + "groups.yaml"}
	yamlOut, err := runCLI(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	jsonOut, err := runCLI(t, append(args, "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(jsonOut, &list); err != nil || list.Kind != "List" || len(list.Items) == 0 {
		t.Fatalf("-o json: %v %s", err, jsonOut)
	}
	if n := strings.Count("\n"+string(yamlOut), "\nkind: "); n != len(list.Items) {
		t.Errorf("-o json has %d items, -o yaml %d objects", len(list.Items), n)
	}
	for _, it := range list.Items {
		if !strings.Contains(string(yamlOut), "name: "+it.Metadata.Name) {
			t.Errorf("%s %s is not in the YAML output", it.Kind, it.Metadata.Name)
		}
	}
}
