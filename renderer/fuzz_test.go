package renderer_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzBundleFiles decodes arbitrary resources: never a panic, and whatever
// decodes stays within the limits, with clean relative paths.
func FuzzBundleFiles(f *testing.F) {
	f.Add("cm.yaml", []byte("apiVersion: v1\nkind: ConfigMap\n"), uint8(0))
	f.Add("chart/templates/x.yaml", []byte("{{ .Values.x }}"), uint8(1))
	f.Add("big.yaml", []byte(renderertest.GzipBomb(f, 1<<20)), uint8(3))
	f.Add("../etc/passwd", []byte("x"), uint8(0))
	f.Add("a//b/../c", []byte("x"), uint8(2))
	f.Add("x", []byte("\x1f\x8b\x08\x00\x00\x00\x00\x00"), uint8(2))
	f.Add("x", []byte("not base64 %%"), uint8(4))
	limits := renderer.SizeLimits{Resource: 64 << 10, Total: 96 << 10}
	f.Fuzz(func(t *testing.T, name string, content []byte, mode uint8) {
		r := fleet.BundleResource{Name: name}
		switch mode % 5 {
		case 0:
			r.Content = string(content)
		case 1:
			r.Content, r.Encoding = base64.StdEncoding.EncodeToString(content), "base64"
		case 2: // content is the gzip stream
			r.Content, r.Encoding = base64.StdEncoding.EncodeToString(content), "base64+gz"
		case 3: // content is already the encoded form
			r.Content, r.Encoding = string(content), "base64+gz"
		case 4:
			r.Content, r.Encoding = string(content), "base64"
		}
		// The same resource three times under different names: the total
		// limit is met before the per-resource one.
		resources := []fleet.BundleResource{r, r, r}
		resources[1].Name, resources[2].Name = "copy/"+name, "other/"+name
		files, err := renderer.BundleFilesWithin(resources, limits)
		if err != nil {
			var tl *renderer.TooLargeError
			if errors.As(err, &tl) && renderer.ReasonOf(err) != fleet.BundleTooLargeReason {
				t.Fatalf("TooLargeError with reason %s", renderer.ReasonOf(err))
			}
			return
		}
		var total int
		for p, data := range files {
			if len(data) > int(limits.Resource) {
				t.Fatalf("%s: %d bytes, over the per-resource limit", p, len(data))
			}
			total += len(data)
			if path.IsAbs(p) || p != path.Clean(p) || p == ".." || strings.HasPrefix(p, "../") {
				t.Fatalf("path %q escapes the Bundle", p)
			}
		}
		if total > int(limits.Total) {
			t.Fatalf("%d bytes in all, over the total limit", total)
		}
	})
}

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
	_, err := renderer.BuildOverlay(files, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: chart}\n"))
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
		err := renderer.CheckOverlayFiles(files)
		if again := renderer.CheckOverlayFiles(files); fmt.Sprint(again) != fmt.Sprint(err) {
			t.Fatalf("not deterministic: %v, then %v", err, again)
		}
		if err != nil {
			if renderer.ReasonOf(err) != fleet.RemoteResourceRefusedReason {
				t.Fatalf("reason %s: %v", renderer.ReasonOf(err), err)
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
		if err := renderer.CheckOverlayFiles(files); err != nil {
			return
		}
		assertNoFetch(t, w, files)
	})
}

// FuzzParseAgentValues feeds arbitrary bytes to the values file parser (the
// controller reads a token's values Secret back with it, and tests read what
// a person installing the agent gets): it never panics, and what it accepts
// writes back to a file that parses to the same values.
func FuzzParseAgentValues(f *testing.F) {
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "edge"}, Spec: fleet.ClusterRegistrationTokenSpec{ClientID: "edge-1"}}
	v, err := renderer.AgentValuesForToken(tok, &config.Config{APIServerURL: "https://upstream.example.com:6443", APIServerCA: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")}, "bearer")
	if err != nil {
		f.Fatal(err)
	}
	seed, err := v.YAML()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(""))
	f.Add([]byte("token: [1, 2]\n"))
	f.Add([]byte("image: {repository: r, tag: 1}\nunknown: x\n"))
	f.Add([]byte("apiServerURL: &a x\ntoken: *a\n"))
	f.Add([]byte("{\"token\": \"\\u00ff\", \"image\": null}"))
	f.Add([]byte("resources: {limits: {cpu: 1000m}}\ntolerations: [{key: k, tolerationSeconds: 3}]\nenv: null\n"))
	f.Add([]byte("resourCes: {limits: {}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := renderer.ParseAgentValues(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "parsing agent values") {
				t.Fatalf("error %q does not say what failed", err)
			}
			return
		}
		out, err := v.YAML()
		if err != nil {
			t.Fatalf("parsed values do not marshal: %v", err)
		}
		again, err := renderer.ParseAgentValues(out)
		if err != nil {
			t.Fatalf("written values do not parse: %v\n%s", err, out)
		}
		// An empty map or list and none are the same values to Helm (the
		// chart's default is empty): omitempty writes neither.
		if diff := cmp.Diff(v, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("values changed on the way through a file (-parsed +again):\n%s", diff)
		}
	})
}
