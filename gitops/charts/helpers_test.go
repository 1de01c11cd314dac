package charts_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"

	"github.com/gitops-fleet/fleet/gitops/charts/chartstest"
)

const cmTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-{{ .Chart.Name }}
data:
  version: {{ .Chart.Version | quote }}
  color: {{ .Values.color | quote }}
`

// chartArchive builds a chart archive: one ConfigMap template, a
// values.yaml, and the extra files given.
func chartArchive(t *testing.T, name, version string, extra map[string][]byte) []byte {
	t.Helper()
	return chartstest.Archive(t, name, version, cmTemplate, "color: red\n", extra)
}

func sha(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// tgz builds an archive by hand (for hostile ones): entries in order.
func tgz(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: tar.TypeReg}
		if e.size > 0 {
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.size > 0 {
			zero := make([]byte, 1<<20)
			for left := e.size; left > 0; left -= int64(len(zero)) {
				if _, err := tw.Write(zero[:min(left, int64(len(zero)))]); err != nil {
					t.Fatal(err)
				}
			}
		} else if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// tarEntry is a file; size > 0 writes that many zero bytes instead of data.
type tarEntry struct {
	name string
	data []byte
	size int64
}

// request is what a test server saw.
type request struct {
	path, auth string
}

// server is a real HTTP(S) server in this process: it serves files by
// path, may require basic auth, and records every request with its
// Authorization header.
type server struct {
	*httptest.Server
	mu         sync.Mutex
	seen       []request
	files      map[string][]byte
	user, pass string
	// redirect maps a path to a URL it redirects to.
	redirect map[string]string
	// noLength serves files chunked, without Content-Length.
	noLength bool
}

func newServer(t *testing.T, tls bool) *server {
	s := &server{files: map[string][]byte{}, redirect: map[string]string{}}
	if tls {
		s.Server = httptest.NewTLSServer(s)
	} else {
		s.Server = httptest.NewServer(s)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.seen = append(s.seen, request{path: r.URL.Path, auth: r.Header.Get("Authorization")})
	data, ok := s.files[r.URL.Path]
	to, redirect := s.redirect[r.URL.Path]
	user, pass, noLength := s.user, s.pass, s.noLength
	s.mu.Unlock()
	if user != "" {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="charts"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
	}
	if redirect {
		http.Redirect(w, r, to, http.StatusFound)
		return
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	if noLength {
		w.(http.Flusher).Flush()
	} else {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	}
	_, _ = w.Write(data)
}

func (s *server) setAuth(user, pass string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.user, s.pass = user, pass
}

func (s *server) setRedirect(path, to string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if to == "" {
		delete(s.redirect, path)
	} else {
		s.redirect[path] = to
	}
}

func (s *server) setChunked(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noLength = on
}

func (s *server) put(path string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[path] = data
}

// requests returns what the server saw, and forgets it.
func (s *server) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.seen
	s.seen = nil
	return out
}

func (s *server) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.seen {
		if r.path == path {
			n++
		}
	}
	return n
}

// caPEM is the server's self-signed certificate, as a caBundle.
func (s *server) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

// repoChart is one chart version a repository serves.
type repoChart struct {
	name, version string
	archive       []byte
	// url overrides where the index says the archive is.
	url string
}

// serveRepository writes an index.yaml (Helm's repo package) listing the
// charts at the server's root and serves their archives under /charts/.
func (s *server) serveRepository(t *testing.T, charts ...repoChart) {
	t.Helper()
	index := repo.NewIndexFile()
	for _, c := range charts {
		file := c.name + "-" + c.version + ".tgz"
		s.put("/charts/"+file, c.archive)
		md := &chart.Metadata{APIVersion: chart.APIVersionV2, Name: c.name, Version: c.version}
		base := "charts"
		if c.url != "" {
			base, file = strings.TrimSuffix(c.url, "/"+filepath.Base(c.url)), filepath.Base(c.url)
		}
		if err := index.MustAdd(md, file, base, sha(c.archive)); err != nil {
			t.Fatal(err)
		}
	}
	index.SortEntries()
	data, err := yaml.Marshal(index)
	if err != nil {
		t.Fatal(err)
	}
	s.put("/index.yaml", data)
}
