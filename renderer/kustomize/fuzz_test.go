package kustomize_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/renderer/kustomize"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

// fetchWatch counts what kustomize tries to fetch in this process: HTTP
// requests through the default transport, and runs of a git program put
// first on PATH.
type fetchWatch struct {
	http atomic.Int64
	git  string // file the fake git appends to
}

func (w *fetchWatch) RoundTrip(*http.Request) (*http.Response, error) {
	w.http.Add(1)
	return nil, errors.New("fetch attempted")
}

func (w *fetchWatch) gitRuns() int {
	data, _ := os.ReadFile(w.git)
	return len(data)
}

func watchFetches(f *testing.F) *fetchWatch {
	dir := f.TempDir()
	w := &fetchWatch{git: filepath.Join(dir, "git-runs")}
	script := "#!/bin/sh\nprintf x >> " + w.git + "\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "git"), []byte(script), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	saved := http.DefaultTransport
	http.DefaultTransport = w
	f.Cleanup(func() { http.DefaultTransport = saved })
	return w
}

// assertNoFetch builds the overlay and fails if kustomize tried to fetch:
// the overlay check must have refused anything that makes it try.
func assertNoFetch(t *testing.T, w *fetchWatch, files map[string][]byte) {
	t.Helper()
	httpBefore, gitBefore := w.http.Load(), w.gitRuns()
	_, err := kustomize.BuildOverlay(files, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: chart}\n"))
	if w.http.Load() != httpBefore || w.gitRuns() != gitBefore {
		t.Fatalf("kustomize tried to fetch (HTTP %d, git %d) for an overlay the check let through (%v):\n%s",
			w.http.Load()-httpBefore, w.gitRuns()-gitBefore, err, files["kustomization.yaml"])
	}
}

// remoteFields are kustomization fields that name something to load, as
// YAML with %s for a value.
var remoteFields = []string{
	"resources: [%s]", "bases: [%s]", "components: [%s]", "crds: [%s]", "configurations: [%s]",
	"openapi: {path: %s}", "patchesStrategicMerge: [%s]", "patches: [{path: %s}]",
	"configMapGenerator: [{name: c, files: [%s]}]", "secretGenerator: [{name: s, envs: [%s]}]",
	"generators: [%s]", "transformers: [%s]", "replacements: [{path: %s}]",
}

// FuzzCheckOverlayFiles puts an arbitrary value in a field that names a
// file: whatever the check lets through, kustomize must not fetch.
func FuzzCheckOverlayFiles(f *testing.F) {
	for _, v := range []string{
		"https://127.0.0.1:1/x.yaml", "http:127.0.0.1:1/x", "github.com/org/repo//deploy?ref=v1", "git@127.0.0.1:org/repo",
		"git::http://127.0.0.1:1/org/repo", "ssh://git@127.0.0.1:1/org/repo", "file:///tmp/repo//deploy", "Https://127.0.0.1:1/x",
		"https://dev.azure.com/org/p/_git/repo", "deploy.yaml", "../base", "app.conf=https://127.0.0.1:1/x", " https://127.0.0.1:1/x",
	} {
		for i := range remoteFields {
			f.Add(v, uint8(i))
		}
	}
	w := watchFetches(f)
	f.Fuzz(func(t *testing.T, value string, field uint8) {
		quoted, _ := json.Marshal(value)
		k := fmt.Sprintf(remoteFields[int(field)%len(remoteFields)], quoted) + "\n"
		files := map[string][]byte{"kustomization.yaml": []byte(k)}
		err := kustomize.CheckOverlayFiles(files)
		if again := kustomize.CheckOverlayFiles(files); fmt.Sprint(again) != fmt.Sprint(err) {
			t.Fatalf("not deterministic: %v, then %v", err, again)
		}
		if err != nil {
			if renderertest.ReasonOf(err) != fleet.RemoteResourceRefusedReason {
				t.Fatalf("reason %s: %v", renderertest.ReasonOf(err), err)
			}
			return
		}
		assertNoFetch(t, w, files)
	})
}

// FuzzBuildOverlay builds arbitrary overlays: never a panic, and never a
// fetch.
func FuzzBuildOverlay(f *testing.F) {
	f.Add([]byte("resources: [cm.yaml]\nlabels:\n- pairs: {team: web}\n"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), []byte("resources: [https://127.0.0.1:1/x]\n"))
	f.Add([]byte("resources: [base]\nnamePrefix: p-\n"), []byte("x: [\n"), []byte("resources: [../cm.yaml]\n"))
	f.Add([]byte("patches:\n- path: cm.yaml\n  target: {kind: ConfigMap}\n"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: chart}\ndata: {a: b}\n"), []byte(""))
	f.Add([]byte("transformers:\n- |\n  apiVersion: builtin\n  kind: PatchTransformer\n  metadata: {name: p}\n  path: https://127.0.0.1:1/p.yaml\n"), []byte(""), []byte(""))
	f.Add([]byte("generators: [cm.yaml]\n"), []byte("apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: g}\nfiles: [https://127.0.0.1:1/f]\n"), []byte("components: [github.com/org/repo]\n"))
	f.Add([]byte("helmCharts: [{name: x, repo: https://127.0.0.1:1}]\n"), []byte(""), []byte("kind: Component\n"))
	w := watchFetches(f)
	f.Fuzz(func(t *testing.T, kustomization, resource, base []byte) {
		files := map[string][]byte{"kustomization.yaml": kustomization, "cm.yaml": resource, "base/kustomization.yaml": base}
		if err := kustomize.CheckOverlayFiles(files); err != nil {
			return
		}
		assertNoFetch(t, w, files)
	})
}
