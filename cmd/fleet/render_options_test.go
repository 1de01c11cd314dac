package main

import (
	"strings"
	"testing"
)

// TestRenderBundle_UnsupportedOptionRefusedAsTheControllerDoes: `fleet
// render bundle` refuses a Bundle with a not-yet option with the message
// the controller sets (reason UnsupportedOption, the option's path) and
// exit status 1, and renders it once the option is gone. A Bundle as
// `fleet apply` writes it (empty ignore and correctDrift) renders.
func TestRenderBundle_UnsupportedOptionRefusedAsTheControllerDoes(t *testing.T) {
	dir := t.TempDir()
	bundle := func(target string) string {
		return writeFile(t, dir, "b.yaml", `apiVersion: fleet.cattle.io/v1alpha1
kind: Bundle
metadata: {name: app, namespace: fleet-default}
spec:
  ignore: {}
  correctDrift: {}
  resources:
  - name: cm.yaml
    content: |
      {apiVersion: v1, kind: ConfigMap, metadata: {name: settings}}
  targets:
  - name: all
    ignore: {}
`+target)
	}
	b := bundle("  - name: prod\n    overwrites: [{kind: ConfigMap, name: x}]\n")
	code, _, stderr := runMain(t, "render", "bundle", "--bundle", b)
	want := "(UnsupportedOption): spec.targets[1].overwrites: taking resources over from another Bundle is not supported yet"
	if code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr %q, want 1 and %q", code, stderr, want)
	}
	out, err := runCLI(t, "render", "bundle", "--bundle", bundle(""))
	if err != nil || !strings.Contains(string(out), "name: settings") {
		t.Errorf("without the option: %v\n%s", err, out)
	}
}
