package bundlecontent

import (
	"strings"
	"testing"
)

func TestSplitPhases_ContentWithoutMarkersIsOneMainPhase(t *testing.T) {
	// What a controller older than phases wrote, hooks and all.
	old := "---\n# Source: a.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, annotations: {helm.sh/hook: pre-install}}\n"
	s, err := SplitPhases([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 1 || s[0].Phase != PhaseMain || string(s[0].YAML) != old {
		t.Fatalf("got %+v, want the whole content as phase main", s)
	}
}

func TestSplitPhases_RoundTrip(t *testing.T) {
	in := []Section{
		{Phase: PhaseCRDs, YAML: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")},
		{Phase: PhaseMain, YAML: []byte("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: n}\n")},
	}
	out, err := SplitPhases(JoinPhases(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].Phase != PhaseCRDs || out[1].Phase != PhaseMain {
		t.Fatalf("got %+v", out)
	}
	if !strings.Contains(string(out[1].YAML), "name: m") || !strings.Contains(string(out[1].YAML), "name: n") || strings.Contains(string(out[1].YAML), "name: c") {
		t.Errorf("main section holds the wrong documents:\n%s", out[1].YAML)
	}
}

func TestSplitPhases_RefusesContentItDidNotWrite(t *testing.T) {
	for name, content := range map[string]string{
		"unknown phase": "---\n# fleet.cattle.io/phase: sometime\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"out of order":  "---\n# fleet.cattle.io/phase: main\n---\n# fleet.cattle.io/phase: crds\n",
		"before marker": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n# fleet.cattle.io/phase: main\n",
	} {
		if _, err := SplitPhases([]byte(content)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
