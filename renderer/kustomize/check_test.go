package kustomize_test

import (
	"errors"
	"strings"
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/renderer/kustomize"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

func TestCheckOverlayFiles_RefusesEveryFieldThatCanFetch(t *testing.T) {
	const url = "https://example.com/deploy.yaml"
	cases := []struct {
		name       string
		files      map[string]string
		file       string
		field, val string
	}{
		{"resources", map[string]string{"kustomization.yaml": "resources:\n- cm.yaml\n- " + url + "\n"}, "kustomization.yaml", "resources[1]", url},
		{"bases", map[string]string{"kustomization.yaml": "bases: [" + url + "]\n"}, "kustomization.yaml", "bases[0]", url},
		{"components", map[string]string{"kustomization.yaml": "components: [" + url + "]\n"}, "kustomization.yaml", "components[0]", url},
		{"crds", map[string]string{"kustomization.yaml": "crds: [" + url + "]\n"}, "kustomization.yaml", "crds[0]", url},
		{"configurations", map[string]string{"kustomization.yaml": "configurations: [" + url + "]\n"}, "kustomization.yaml", "configurations[0]", url},
		{"openapi path", map[string]string{"kustomization.yaml": "openapi:\n  path: " + url + "\n"}, "kustomization.yaml", "openapi.path", url},
		{"patchesStrategicMerge", map[string]string{"kustomization.yaml": "patchesStrategicMerge: [" + url + "]\n"}, "kustomization.yaml", "patchesStrategicMerge[0]", url},
		{"patches path", map[string]string{"kustomization.yaml": "patches:\n- path: " + url + "\n"}, "kustomization.yaml", "patches[0].path", url},
		{"patchesJson6902 path", map[string]string{"kustomization.yaml": "patchesJson6902:\n- path: " + url + "\n  target: {kind: ConfigMap, name: x}\n"}, "kustomization.yaml", "patchesJson6902[0].path", url},
		{"replacements path", map[string]string{"kustomization.yaml": "replacements:\n- path: " + url + "\n"}, "kustomization.yaml", "replacements[0].path", url},
		{"configMapGenerator file with key", map[string]string{"kustomization.yaml": "configMapGenerator:\n- name: c\n  files: [app.conf=" + url + "]\n"}, "kustomization.yaml", "configMapGenerator[0].files[0]", "app.conf=" + url},
		{"configMapGenerator envs", map[string]string{"kustomization.yaml": "configMapGenerator:\n- name: c\n  envs: [" + url + "]\n"}, "kustomization.yaml", "configMapGenerator[0].envs[0]", url},
		{"secretGenerator env", map[string]string{"kustomization.yaml": "secretGenerator:\n- name: s\n  env: " + url + "\n"}, "kustomization.yaml", "secretGenerator[0].env", url},
		{"generators path", map[string]string{"kustomization.yaml": "generators: [" + url + "]\n"}, "kustomization.yaml", "generators[0]", url},
		{"validators path", map[string]string{"kustomization.yaml": "validators: [" + url + "]\n"}, "kustomization.yaml", "validators[0]", url},
		{"inline transformer with a remote patch", map[string]string{"kustomization.yaml": "transformers:\n- |\n  apiVersion: builtin\n  kind: PatchTransformer\n  metadata: {name: p}\n  path: " + url + "\n"},
			"kustomization.yaml", "transformers[0] PatchTransformer path", url},
		{"transformer file with a remote patch", map[string]string{"kustomization.yaml": "transformers: [t.yaml]\n",
			"t.yaml": "apiVersion: builtin\nkind: PatchStrategicMergeTransformer\nmetadata: {name: p}\npaths: [ok.yaml, " + url + "]\n"},
			"t.yaml", "PatchStrategicMergeTransformer paths", url},
		{"plugin configurations in a List, field name in other case", map[string]string{"gen/kustomization.yaml": "resources: [g.yaml]\n",
			"gen/g.yaml": "apiVersion: v1\nkind: List\nitems:\n- apiVersion: builtin\n  kind: ConfigMapGenerator\n  metadata: {name: c}\n  FILES: [" + url + "]\n"},
			"gen/g.yaml", "ConfigMapGenerator FILES", url},
		{"ReplacementTransformer replacements path", map[string]string{"kustomization.yaml": "transformers: [r.yaml]\n",
			"r.yaml": "apiVersion: builtin\nkind: ReplacementTransformer\nmetadata: {name: r}\nreplacements:\n- path: ok.yaml\n- path: " + url + "\n"},
			"r.yaml", "ReplacementTransformer replacements[1].path", url},
		{"helmCharts", map[string]string{"kustomization.yaml": "helmCharts:\n- name: redis\n  repo: https://charts.example.com\n"}, "kustomization.yaml", "helmCharts[0]", "https://charts.example.com/redis"},
		{"helmChartInflationGenerator", map[string]string{"kustomization.yaml": "helmChartInflationGenerator:\n- chartName: redis\n"}, "kustomization.yaml", "helmChartInflationGenerator[0]", "redis"},
		{"HelmChartInflationGenerator plugin", map[string]string{"kustomization.yaml": "generators: [h.yaml]\n", "h.yaml": "apiVersion: builtin\nkind: HelmChartInflationGenerator\nmetadata: {name: h}\nname: redis\n"},
			"h.yaml", "HelmChartInflationGenerator", "redis"},
		{"nested kustomization, any of the three names", map[string]string{"kustomization.yaml": "resources: [base]\n", "base/Kustomization": "resources: [" + url + "]\n"}, "base/Kustomization", "resources[0]", url},
		{"field name in other case, as kustomize reads it", map[string]string{"kustomization.yaml": "Resources: [" + url + "]\n"}, "kustomization.yaml", "resources[0]", url},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string][]byte{}
			for k, v := range tc.files {
				files[k] = []byte(v)
			}
			err := kustomize.CheckOverlayFiles(files)
			var re *kustomize.RemoteResourceError
			if !errors.As(err, &re) || re.File != tc.file || re.Field != tc.field || re.Value != tc.val {
				t.Fatalf("got %v (%+v), want %s %s %q", err, re, tc.file, tc.field, tc.val)
			}
			if renderertest.ReasonOf(err) != fleet.RemoteResourceRefusedReason {
				t.Errorf("reason %s", renderertest.ReasonOf(err))
			}
		})
	}
}

func TestCheckOverlayFiles_RemoteForms(t *testing.T) {
	remote := []string{
		"https://example.com/x.yaml", "HTTP://example.com/x.yaml", "http:example.com/x.yaml", " https://example.com/x.yaml",
		"github.com/org/repo//deploy?ref=v1", "GitHub.com:org/repo", "git@github.com:org/repo.git//deploy",
		"git::https://example.com/org/repo", "ssh://git@example.com/org/repo", "file:///srv/repo//deploy",
		"https://dev.azure.com/org/project/_git/repo//deploy", "oci://registry.example.com/x", "deploy@host:repo",
	}
	local := []string{"deploy.yaml", "../base", "dir/sub", "github.com.yaml", "a-file-named-https.yaml", "_git/x", "./x.git/y"}
	for _, v := range remote {
		err := kustomize.CheckOverlayFiles(map[string][]byte{"kustomization.yaml": []byte("resources:\n- '" + v + "'\n")})
		if renderertest.ReasonOf(err) != fleet.RemoteResourceRefusedReason {
			t.Errorf("%q: got %v, want it refused", v, err)
		}
	}
	for _, v := range local {
		if err := kustomize.CheckOverlayFiles(map[string][]byte{"kustomization.yaml": []byte("resources:\n- '" + v + "'\n")}); err != nil {
			t.Errorf("%q: got %v, want it allowed", v, err)
		}
	}
}

// URLs as data (labels, annotations, literals, inline patches, resources)
// are not fetched and stay allowed.
func TestCheckOverlayFiles_AllowsURLsAsData(t *testing.T) {
	files := map[string][]byte{
		"kustomization.yaml": []byte(`resources: [cm.yaml]
commonAnnotations: {docs: "https://example.com/docs"}
labels:
- pairs: {source: github.com}
configMapGenerator:
- name: urls
  literals: ["home=https://example.com"]
patches:
- patch: |
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: x, annotations: {link: "https://example.com/x"}}
transformers:
- |
  apiVersion: builtin
  kind: AnnotationsTransformer
  metadata: {name: a}
  annotations: {path: "https://example.com/not-a-file"}
  fieldSpecs: [{path: metadata/annotations, create: true}]
`),
		"cm.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {url: \"https://example.com\", path: \"https://example.com\"}\n"),
	}
	if err := kustomize.CheckOverlayFiles(files); err != nil {
		t.Fatal(err)
	}
	out, err := kustomize.BuildOverlay(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "home: https://example.com") {
		t.Errorf("overlay output:\n%s", out)
	}
}
