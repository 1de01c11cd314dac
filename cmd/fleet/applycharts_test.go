package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/charts/chartstest"
)

// helmRepository is a Helm chart repository over TLS with basic auth
// (index.yaml and archives, as `helm repo index` serves them), recording
// which requests carried credentials.
type helmRepository struct {
	srv        *httptest.Server
	mu         sync.Mutex
	files      map[string][]byte
	authorized []string // paths of requests that carried an Authorization header
}

func newHelmRepository(t *testing.T, user, pass string) *helmRepository {
	t.Helper()
	r := &helmRepository{files: map[string][]byte{}}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if req.Header.Get("Authorization") != "" {
			r.authorized = append(r.authorized, req.URL.Path)
		}
		if u, p, ok := req.BasicAuth(); !ok || u != user || p != pass {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		data, ok := r.files[req.URL.Path]
		if !ok {
			http.NotFound(w, req)
			return
		}
		_, _ = w.Write(data)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// addChart packages a chart with the Helm SDK (what `helm package` writes)
// and lists it in the index.
func (r *helmRepository) addChart(t *testing.T, name, version, template string) {
	t.Helper()
	archive := chartstest.Archive(t, name, version, template, "color: red\n", nil)
	md := &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: version}
	sum := sha256.Sum256(archive)
	r.mu.Lock()
	defer r.mu.Unlock()
	file := name + "-" + version + ".tgz"
	r.files["/charts/"+file] = archive
	index := repo.NewIndexFile()
	if old, ok := r.files["/index.yaml"]; ok {
		if err := yaml.Unmarshal(old, index); err != nil {
			t.Fatal(err)
		}
	}
	if err := index.MustAdd(md, file, r.srv.URL+"/charts", hex.EncodeToString(sum[:])); err != nil {
		t.Fatal(err)
	}
	index.SortEntries()
	data, err := yaml.Marshal(index)
	if err != nil {
		t.Fatal(err)
	}
	r.files["/index.yaml"] = data
}

func (r *helmRepository) caFile(t *testing.T) string {
	t.Helper()
	pemData := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})
	return writeFile(t, t.TempDir(), "ca.crt", string(pemData))
}

func (r *helmRepository) authorizedPaths() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.authorized...)
}

// TestApply_ChartsFromARepositoryAreEmbeddedAndRender: a fleet.yaml naming
// a chart of a private Helm repository (helm.repo, helm.version as a
// semver range) is fetched by `fleet apply` with the flags' credentials
// and CA, embedded where Fleet's fleet apply puts it, and `fleet render
// bundle` renders that copy, offline, with the fleet.yaml's values. The
// credentials are sent only where --helm-repo-url-regex allows: without it
// the repository refuses the anonymous request, the path fails naming the
// chart, and no request carried them.
func TestApply_ChartsFromARepositoryAreEmbeddedAndRender(t *testing.T) {
	r := newHelmRepository(t, "reader", "s3cret")
	tmpl := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-{{ .Chart.Version }}\ndata:\n  color: {{ .Values.color | quote }}\n"
	r.addChart(t, "podinfo", "1.0.0", tmpl)
	r.addChart(t, "podinfo", "1.2.0", tmpl)
	r.addChart(t, "podinfo", "2.0.0", tmpl)

	root := t.TempDir()
	writeFile(t, root, "app/fleet.yaml", "defaultNamespace: app\nhelm:\n  releaseName: web\n  repo: "+r.srv.URL+"\n  chart: podinfo\n  version: ^1.0.0\n  values:\n    color: blue\n")
	dir := t.TempDir()
	passFile := writeFile(t, dir, "password", "s3cret\n")
	out := filepath.Join(dir, "bundles.yaml")

	// No regex: the credentials go nowhere, the repository refuses.
	code, _, stderr := runMain(t, "apply", "-o", out, "--root", root, "-n", "fleet-default",
		"--username", "reader", "--password-file", passFile, "--cacerts-file", r.caFile(t), "repo", "app")
	if code != 1 || !strings.Contains(stderr, "path app: app/fleet.yaml: helm.repo:") || !strings.Contains(stderr, `"podinfo"`) {
		t.Errorf("without --helm-repo-url-regex: exit %d, stderr:\n%s\nwant exit 1 naming the path, helm.repo and the chart", code, stderr)
	}
	if strings.Contains(stderr, "s3cret") {
		t.Errorf("the password is in the output:\n%s", stderr)
	}
	if got := r.authorizedPaths(); len(got) != 0 {
		t.Errorf("requests carried credentials without --helm-repo-url-regex: %v", got)
	}

	code, stdout, stderr := runMain(t, "apply", "-o", out, "--root", root, "-n", "fleet-default",
		"--username", "reader", "--password-file", passFile, "--cacerts-file", r.caFile(t),
		"--helm-repo-url-regex", "https://127\\.0\\.0\\.1:[0-9]+.*", "repo", "app")
	if code != 0 || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	b := &fleet.Bundle{}
	if err := yaml.UnmarshalStrict(data, b); err != nil {
		t.Fatalf("the Bundle: %v\n%s", err, data)
	}
	if b.Spec.Helm == nil || b.Spec.Helm.Repo != r.srv.URL || b.Spec.Helm.Version != "^1.0.0" {
		t.Errorf("helm options %+v: want them as the fleet.yaml writes them", b.Spec.Helm)
	}
	var chartFile string
	for _, res := range b.Spec.Resources {
		if strings.HasPrefix(res.Name, ".chart/") && strings.HasSuffix(res.Name, "/podinfo/Chart.yaml") {
			chartFile = res.Name
			if !strings.Contains(res.Content, "version: 1.2.0") {
				t.Errorf("embedded %s:\n%s\nwant version 1.2.0 (the highest in ^1.0.0)", res.Name, res.Content)
			}
		}
		if strings.Contains(res.Content, "s3cret") {
			t.Errorf("the password is in resource %s", res.Name)
		}
	}
	if chartFile == "" {
		t.Fatalf("no .chart/<sha256>/podinfo/Chart.yaml among the resources: %v", resourceNames(b))
	}

	got, err := runCLI(t, "render", "bundle", "--bundle", out)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	for _, want := range []string{"name: web-1.2.0", `color: "blue"`} {
		if !strings.Contains(string(got), want) {
			t.Errorf("render lacks %q:\n%s", want, got)
		}
	}
}

func resourceNames(b *fleet.Bundle) []string {
	var names []string
	for _, r := range b.Spec.Resources {
		names = append(names, r.Name)
	}
	return names
}
