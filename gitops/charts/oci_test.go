package charts_test

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v4/pkg/registry"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/charts"
)

// ociRegistry is a real OCI registry (go-containerregistry's) in this
// process over TLS, requiring basic auth, recording which requests carried
// an Authorization header and which blobs were read.
type ociRegistry struct {
	*httptest.Server
	host       string
	user, pass string
	mu         sync.Mutex
	authed     int
	blobGets   map[string]int
}

func newOCIRegistry(t *testing.T, user, pass string) *ociRegistry {
	r := &ociRegistry{user: user, pass: pass, blobGets: map[string]int{}}
	reg := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	r.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, p, ok := req.BasicAuth()
		r.mu.Lock()
		if req.Header.Get("Authorization") != "" {
			r.authed++
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.blobGets[req.URL.Path]++
		}
		r.mu.Unlock()
		if !ok || u != r.user || p != r.pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, req)
	}))
	t.Cleanup(r.Close)
	r.host = strings.TrimPrefix(r.URL, "https://")
	return r
}

func (r *ociRegistry) counts() (authed, blobGets int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.blobGets {
		blobGets += n
	}
	a := r.authed
	r.authed, r.blobGets = 0, map[string]int{}
	return a, blobGets
}

// blobRead is how often the blob of data was read.
func (r *ociRegistry) blobRead(data []byte) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for p, c := range r.blobGets {
		if strings.HasSuffix(p, "/blobs/sha256:"+sha(data)) {
			n += c
		}
	}
	return n
}

// push uploads chart archives with Helm's own registry client, as `helm
// push` does.
func (r *ociRegistry) push(t *testing.T, repoPath string, archives map[string][]byte) {
	t.Helper()
	hc := r.Client() // trusts the server's certificate
	c, err := registry.NewClient(registry.ClientOptHTTPClient(hc), registry.ClientOptBasicAuth(r.user, r.pass),
		registry.ClientOptCredentialsFile(t.TempDir()+"/creds.json"))
	if err != nil {
		t.Fatal(err)
	}
	for version, data := range archives {
		// The version as it is: Helm's client stores "+" as "_".
		if _, err := c.Push(data, r.host+"/"+repoPath+":"+version); err != nil {
			t.Fatalf("push %s: %v", version, err)
		}
	}
	r.counts()
}

// TestFetch_OCIRegistry: charts from an OCI registry, named in helm.repo or
// helm.chart, by exact version, range or tag in the reference, with the
// Secret's credentials; a missing version says what the registry has;
// without a matching helmRepoURLRegex the credentials are not sent.
func TestFetch_OCIRegistry(t *testing.T) {
	r := newOCIRegistry(t, "bot", "s3cret")
	archives := map[string][]byte{}
	for _, v := range []string{"1.0.0", "1.1.0", "2.0.0+build.1"} {
		archives[v] = chartArchive(t, "app", v, nil)
	}
	r.push(t, "charts/app", archives)
	ca := (&server{Server: r.Server}).caPEM()
	auth := charts.Auth{Username: "bot", Password: "s3cret", CABundle: ca}
	regex := `oci://` + strings.ReplaceAll(r.host, ".", `\.`) + `/charts`
	f := charts.NewFetcher(charts.Options{})
	for _, c := range []struct {
		helm fleet.HelmOptions
		want string
	}{
		{fleet.HelmOptions{Repo: "oci://" + r.host + "/charts/app", Version: "^1.0.0"}, "1.1.0"},
		{fleet.HelmOptions{Repo: "oci://" + r.host + "/charts", Chart: "app", Version: "1.0.0"}, "1.0.0"},
		{fleet.HelmOptions{Chart: "oci://" + r.host + "/charts/app", Version: "2.0.0+build.1"}, "2.0.0+build.1"},
		{fleet.HelmOptions{Chart: "oci://" + r.host + "/charts/app:1.1.0"}, "1.1.0"},
		{fleet.HelmOptions{Repo: "oci://" + r.host + "/charts/app"}, "2.0.0+build.1"},
	} {
		ch, err := f.Fetch(context.Background(), charts.Request{Helm: c.helm, Auth: auth, URLRegex: regex})
		if err != nil {
			t.Fatalf("%+v: %v", c.helm, err)
		}
		if ch.Name != "app" || ch.Version != c.want || ch.Digest != "sha256:"+sha(archives[c.want]) {
			t.Errorf("%+v: got %s %s %s, want %s", c.helm, ch.Name, ch.Version, ch.Digest, c.want)
		}
	}
	// Again: the manifest is resolved, the chart comes from the cache.
	if _, blobs := r.counts(); blobs == 0 {
		t.Fatal("no blob was read at all")
	}
	if _, err := f.Fetch(context.Background(), charts.Request{Helm: fleet.HelmOptions{Repo: "oci://" + r.host + "/charts/app", Version: "1.1.0"}, Auth: auth, URLRegex: regex}); err != nil {
		t.Fatal(err)
	}
	if _, blobs := r.counts(); blobs != 0 {
		t.Errorf("a cached chart was downloaded again (%d blob reads)", blobs)
	}

	_, err := f.Fetch(context.Background(), charts.Request{Helm: fleet.HelmOptions{Repo: "oci://" + r.host + "/charts/app", Version: "^5"}, Auth: auth, URLRegex: regex})
	var nf *charts.NotFoundError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), `chart oci://`+r.host+`/charts/app version "^5"`) || !strings.Contains(err.Error(), "2.0.0+build.1, 1.1.0, 1.0.0") {
		t.Errorf("missing version: %v", err)
	}
	_, err = f.Fetch(context.Background(), charts.Request{Helm: fleet.HelmOptions{Repo: "oci://" + r.host + "/charts/nope", Version: "1.0.0"}, Auth: auth, URLRegex: regex})
	if !errors.As(err, &nf) {
		t.Errorf("missing chart: %v", err)
	}

	authed, _ := r.counts()
	_, err = charts.NewFetcher(charts.Options{}).Fetch(context.Background(), charts.Request{Helm: fleet.HelmOptions{Repo: "oci://" + r.host + "/charts/app", Version: "1.0.0"}, Auth: auth, URLRegex: `oci://registry\.example/`})
	if authed, _ = r.counts(); authed != 0 {
		t.Errorf("%d requests carried credentials the regex does not allow", authed)
	}
	if err == nil || !strings.Contains(err.Error(), "helmRepoURLRegex does not match") {
		t.Errorf("refused: %v", err)
	}
}

// TestFetch_OCIArchiveLimit: a chart layer over the limit is refused from
// the manifest's size, naming the chart and the limit.
func TestFetch_OCIArchiveLimit(t *testing.T) {
	r := newOCIRegistry(t, "bot", "s3cret")
	noise := make([]byte, 100<<10)
	_, _ = rand.Read(noise)
	archive := chartArchive(t, "big", "1.0.0", map[string][]byte{"files/noise.bin": noise})
	r.push(t, "charts/big", map[string][]byte{"1.0.0": archive})
	ca := (&server{Server: r.Server}).caPEM()
	f := charts.NewFetcher(charts.Options{Limits: charts.Limits{Archive: 32 << 10}})
	_, err := f.Fetch(context.Background(), charts.Request{Helm: fleet.HelmOptions{Repo: "oci://" + r.host + "/charts/big", Version: "1.0.0"},
		Auth: charts.Auth{Username: "bot", Password: "s3cret", CABundle: ca}, URLRegex: ".*"})
	var tl *charts.TooLargeError
	if !errors.As(err, &tl) || !strings.Contains(err.Error(), "over the limit of 32 KiB") {
		t.Errorf("err = %v", err)
	}
	if n := r.blobRead(archive); n != 0 {
		t.Errorf("the oversized layer was read %d times", n)
	}
}
