package charts_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/charts"
)

// privateRepo is a TLS Helm repository (self-signed CA) that requires
// basic auth, serving app 1.0.0, 1.2.0, 2.0.0 and 3.0.0-rc.1.
func privateRepo(t *testing.T) (*server, map[string][]byte) {
	s := newServer(t, true)
	s.setAuth("bot", "s3cret")
	archives := map[string][]byte{}
	var list []repoChart
	for _, v := range []string{"1.0.0", "1.2.0", "2.0.0", "3.0.0-rc.1"} {
		archives[v] = chartArchive(t, "app", v, nil)
		list = append(list, repoChart{name: "app", version: v, archive: archives[v]})
	}
	s.serveRepository(t, list...)
	return s, archives
}

func fetch(t *testing.T, f *charts.Fetcher, req charts.Request) (*charts.Chart, error) {
	t.Helper()
	return f.Fetch(context.Background(), req)
}

// TestFetch_RepositoryWithBasicAuthAndTLS: a chart from a private https
// repository trusted through the Secret's CA: the range picks the highest
// matching version, no version the latest stable one; the digest is the
// archive's sha256 and the files are the chart's.
func TestFetch_RepositoryWithBasicAuthAndTLS(t *testing.T) {
	s, archives := privateRepo(t)
	auth := charts.Auth{Username: "bot", Password: "s3cret", CABundle: s.caPEM()}
	f := charts.NewFetcher(charts.Options{})
	for _, c := range []struct{ version, want string }{
		{"^1.0.0", "1.2.0"},
		{"1.0.0", "1.0.0"},
		{"~2", "2.0.0"},
		{"", "2.0.0"},
		{">=3.0.0-0", "3.0.0-rc.1"},
	} {
		ch, err := fetch(t, f, charts.Request{Helm: fleet.HelmOptions{Repo: s.URL, Chart: "app", Version: c.version}, Auth: auth, URLRegex: strings.ReplaceAll(s.URL, ".", `\.`)})
		if err != nil {
			t.Fatalf("version %q: %v", c.version, err)
		}
		if ch.Name != "app" || ch.Version != c.want || ch.Digest != "sha256:"+sha(archives[c.want]) || ch.Size != int64(len(archives[c.want])) {
			t.Errorf("version %q: got %s %s %s, want %s", c.version, ch.Name, ch.Version, ch.Digest, c.want)
		}
		if !strings.Contains(string(ch.Files["app/templates/cm.yaml"]), "kind: ConfigMap") || string(ch.Files["app/values.yaml"]) != "color: red\n" {
			t.Errorf("files %v", keys(ch.Files))
		}
	}
	// Without the CA the server is not trusted.
	_, err := fetch(t, charts.NewFetcher(charts.Options{}), charts.Request{Helm: fleet.HelmOptions{Repo: s.URL, Chart: "app"}, Auth: charts.Auth{Username: "bot", Password: "s3cret"}, URLRegex: ".*"})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted server: %v", err)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestFetch_NotFoundNamesChartAndVersion: a missing chart or version says
// which, and what the repository has instead.
func TestFetch_NotFoundNamesChartAndVersion(t *testing.T) {
	s, _ := privateRepo(t)
	auth := charts.Auth{Username: "bot", Password: "s3cret", CABundle: s.caPEM()}
	f := charts.NewFetcher(charts.Options{})
	for _, c := range []struct {
		chart, version string
		want           []string
	}{
		{"nope", "1.0.0", []string{`chart "nope" version "1.0.0" from repository ` + s.URL, `the repository has no chart "nope"`}},
		{"app", "^9.0.0", []string{`chart "app" version "^9.0.0"`, "no version matches; the repository has 3.0.0-rc.1, 2.0.0, 1.2.0, 1.0.0"}},
	} {
		_, err := fetch(t, f, charts.Request{Helm: fleet.HelmOptions{Repo: s.URL, Chart: c.chart, Version: c.version}, Auth: auth, URLRegex: ".*"})
		var nf *charts.NotFoundError
		if !errors.As(err, &nf) {
			t.Fatalf("%s %s: err = %v, want NotFoundError", c.chart, c.version, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %q", err, w)
			}
		}
	}
}

// TestFetch_ChartURL: helm.chart an https URL of an archive; a missing one
// is a NotFoundError naming it.
func TestFetch_ChartURL(t *testing.T) {
	s := newServer(t, true)
	archive := chartArchive(t, "web", "0.3.0", nil)
	s.put("/dl/web-0.3.0.tgz", archive)
	f := charts.NewFetcher(charts.Options{})
	ch, err := fetch(t, f, charts.Request{Helm: fleet.HelmOptions{Chart: s.URL + "/dl/web-0.3.0.tgz"}, Auth: charts.Auth{CABundle: s.caPEM()}})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Name != "web" || ch.Version != "0.3.0" || ch.Digest != "sha256:"+sha(archive) {
		t.Errorf("got %s %s %s", ch.Name, ch.Version, ch.Digest)
	}
	_, err = fetch(t, f, charts.Request{Helm: fleet.HelmOptions{Chart: s.URL + "/dl/missing.tgz"}, Auth: charts.Auth{CABundle: s.caPEM()}})
	var nf *charts.NotFoundError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), s.URL+"/dl/missing.tgz") {
		t.Errorf("err = %v", err)
	}
}

// TestFetch_CredentialsOnlyWhereAllowed: the Helm credentials reach the
// repository helmRepoURLRegex matches, and nothing else: not a repository
// the regex does not match, not an archive the index places on another
// host, not a host a redirect leads to, never plain HTTP; a URL the regex
// names itself gets them.
func TestFetch_CredentialsOnlyWhereAllowed(t *testing.T) {
	const user, pass = "bot", "s3cret"
	archive := chartArchive(t, "app", "1.0.0", nil)
	other := newServer(t, true) // another host (same address, another port)
	other.put("/mirror/app-1.0.0.tgz", archive)
	home := newServer(t, true)
	ca := append(home.caPEM(), other.caPEM()...)
	auth := charts.Auth{Username: user, Password: pass, CABundle: ca}
	quote := func(s string) string { return strings.ReplaceAll(s, ".", `\.`) }

	sawCredentials := func(s *server) []string {
		var out []string
		for _, r := range s.requests() {
			if r.auth != "" {
				out = append(out, r.path)
			}
		}
		return out
	}

	t.Run("regex does not match the repository", func(t *testing.T) {
		home.serveRepository(t, repoChart{name: "app", version: "1.0.0", archive: archive})
		home.setAuth(user, pass)
		defer home.setAuth("", "")
		_, err := fetch(t, charts.NewFetcher(charts.Options{}), charts.Request{Helm: fleet.HelmOptions{Repo: home.URL, Chart: "app"}, Auth: auth, URLRegex: `https://charts\.example/`})
		if got := sawCredentials(home); len(got) > 0 {
			t.Errorf("credentials sent to %v", got)
		}
		if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "helmRepoURLRegex does not match "+home.URL) {
			t.Errorf("err = %v", err)
		}
		_, err = fetch(t, charts.NewFetcher(charts.Options{}), charts.Request{Helm: fleet.HelmOptions{Repo: home.URL, Chart: "app"}, Auth: auth})
		if got := sawCredentials(home); len(got) > 0 || err == nil {
			t.Errorf("without a regex: credentials sent to %v, err %v", got, err)
		}
	})
	t.Run("index places the archive on another host", func(t *testing.T) {
		home.serveRepository(t, repoChart{name: "app", version: "1.0.0", archive: archive, url: other.URL + "/mirror/app-1.0.0.tgz"})
		if _, err := fetch(t, charts.NewFetcher(charts.Options{}), charts.Request{Helm: fleet.HelmOptions{Repo: home.URL, Chart: "app"}, Auth: auth, URLRegex: quote(home.URL)}); err != nil {
			t.Fatal(err)
		}
		if got := sawCredentials(home); len(got) != 1 || got[0] != "/index.yaml" {
			t.Errorf("the repository got credentials on %v, want /index.yaml", got)
		}
		if got := sawCredentials(other); len(got) > 0 {
			t.Errorf("credentials sent to the other host: %v", got)
		}
	})
	t.Run("redirect to another host", func(t *testing.T) {
		home.serveRepository(t, repoChart{name: "app", version: "1.0.0", archive: archive})
		home.setRedirect("/charts/app-1.0.0.tgz", other.URL+"/mirror/app-1.0.0.tgz")
		defer home.setRedirect("/charts/app-1.0.0.tgz", "")
		if _, err := fetch(t, charts.NewFetcher(charts.Options{}), charts.Request{Helm: fleet.HelmOptions{Repo: home.URL, Chart: "app"}, Auth: auth, URLRegex: quote(home.URL)}); err != nil {
			t.Fatal(err)
		}
		if got := sawCredentials(home); len(got) != 2 {
			t.Errorf("the repository got credentials on %v, want the index and the archive's first URL", got)
		}
		if got := sawCredentials(other); len(got) > 0 {
			t.Errorf("credentials followed the redirect to %v", got)
		}
		// A chart URL redirecting elsewhere: same.
		if _, err := fetch(t, charts.NewFetcher(charts.Options{}), charts.Request{Helm: fleet.HelmOptions{Chart: home.URL + "/charts/app-1.0.0.tgz"}, Auth: auth, URLRegex: quote(home.URL)}); err != nil {
			t.Fatal(err)
		}
		if got := sawCredentials(other); len(got) > 0 {
			t.Errorf("credentials followed the chart URL's redirect to %v", got)
		}
		sawCredentials(home)
	})
	t.Run("a host the regex names gets them", func(t *testing.T) {
		home.serveRepository(t, repoChart{name: "app", version: "1.0.0", archive: archive, url: other.URL + "/mirror/app-1.0.0.tgz"})
		if _, err := fetch(t, charts.NewFetcher(charts.Options{}), charts.Request{Helm: fleet.HelmOptions{Repo: home.URL, Chart: "app"}, Auth: auth, URLRegex: quote(home.URL) + "|" + quote(other.URL) + "/mirror/"}); err != nil {
			t.Fatal(err)
		}
		if got := sawCredentials(other); len(got) != 1 {
			t.Errorf("the named host got credentials on %v, want the archive", got)
		}
		sawCredentials(home)
	})
	t.Run("never over plain HTTP", func(t *testing.T) {
		plain := newServer(t, false)
		plain.serveRepository(t, repoChart{name: "app", version: "1.0.0", archive: archive})
		if _, err := fetch(t, charts.NewFetcher(charts.Options{}), charts.Request{Helm: fleet.HelmOptions{Repo: plain.URL, Chart: "app"}, Auth: auth, URLRegex: ".*"}); err != nil {
			t.Fatal(err)
		}
		if got := sawCredentials(plain); len(got) > 0 {
			t.Errorf("credentials sent over plain HTTP: %v", got)
		}
	})
}

// TestFetch_CacheFetchesOnce: 50 Bundles naming one chart, fetched at once
// and again: one index read, one archive download.
func TestFetch_CacheFetchesOnce(t *testing.T) {
	s, _ := privateRepo(t)
	auth := charts.Auth{Username: "bot", Password: "s3cret", CABundle: s.caPEM()}
	f := charts.NewFetcher(charts.Options{})
	var wg sync.WaitGroup
	digests := make([]string, 50)
	for i := range digests {
		wg.Go(func() {
			ch, err := f.Fetch(context.Background(), charts.Request{Helm: fleet.HelmOptions{Repo: s.URL, Chart: "app", Version: "^1"}, Auth: auth, URLRegex: ".*"})
			if err != nil {
				t.Error(err)
				return
			}
			digests[i] = ch.Digest
		})
	}
	wg.Wait()
	for i := range 3 {
		if _, err := fetch(t, f, charts.Request{Helm: fleet.HelmOptions{Repo: s.URL, Chart: "app", Version: "1.2.0"}, Auth: auth, URLRegex: ".*"}); err != nil {
			t.Fatalf("again %d: %v", i, err)
		}
	}
	if n := s.count("/index.yaml"); n != 1 {
		t.Errorf("index.yaml read %d times, want 1", n)
	}
	if n := s.count("/charts/app-1.2.0.tgz"); n != 1 {
		t.Errorf("archive downloaded %d times, want 1", n)
	}
	for _, d := range digests {
		if d != digests[0] {
			t.Fatalf("digests differ: %v", digests)
		}
	}
	// Without credentials the cached chart is not handed out: the
	// repository refuses.
	if _, err := fetch(t, f, charts.Request{Helm: fleet.HelmOptions{Repo: s.URL, Chart: "app", Version: "1.2.0"}, Auth: charts.Auth{CABundle: s.caPEM()}}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("without credentials: %v", err)
	}
}

// TestFetch_Bounds: an archive over the size limit (announced or not), a
// decompression bomb and an archive of too many files are refused, each
// naming the chart and the limit.
func TestFetch_Bounds(t *testing.T) {
	s := newServer(t, true)
	f := charts.NewFetcher(charts.Options{Limits: charts.Limits{Archive: 64 << 10, Uncompressed: 1 << 20, Files: 50}})
	get := func(path string) error {
		_, err := fetch(t, f, charts.Request{Helm: fleet.HelmOptions{Chart: s.URL + path}, Auth: charts.Auth{CABundle: s.caPEM()}})
		return err
	}
	noise := make([]byte, 200<<10)
	_, _ = rand.Read(noise) // does not compress
	big := chartArchive(t, "big", "1.0.0", map[string][]byte{"files/noise.bin": noise})
	s.put("/big-1.0.0.tgz", big)
	for _, chunked := range []bool{false, true} {
		s.setChunked(chunked)
		err := get("/big-1.0.0.tgz")
		var tl *charts.TooLargeError
		if !errors.As(err, &tl) || !strings.Contains(err.Error(), "chart "+s.URL+"/big-1.0.0.tgz") || !strings.Contains(err.Error(), "over the limit of 64 KiB") {
			t.Errorf("chunked=%v: err = %v", chunked, err)
		}
	}
	s.setChunked(false)
	if !strings.Contains(fmt.Sprint(get("/big-1.0.0.tgz")), fmt.Sprintf("is %.1f KiB", float64(len(big))/1024)) {
		t.Errorf("the size announced is not in the message: %v", get("/big-1.0.0.tgz"))
	}

	bomb := tgz(t, tarEntry{name: "bomb/Chart.yaml", data: []byte("apiVersion: v2\nname: bomb\nversion: 1.0.0\n")}, tarEntry{name: "bomb/files/zeros", size: 32 << 20})
	if len(bomb) > 64<<10 {
		t.Fatalf("the bomb is %d bytes, over the archive limit", len(bomb))
	}
	s.put("/bomb.tgz", bomb)
	if err := get("/bomb.tgz"); err == nil || !strings.Contains(err.Error(), "decompress to more than 1 MiB, the limit") {
		t.Errorf("bomb: %v", err)
	}
	entries := []tarEntry{{name: "many/Chart.yaml", data: []byte("apiVersion: v2\nname: many\nversion: 1.0.0\n")}}
	for i := range 60 {
		entries = append(entries, tarEntry{name: fmt.Sprintf("many/files/%d", i), data: []byte("x")})
	}
	s.put("/many.tgz", tgz(t, entries...))
	if err := get("/many.tgz"); err == nil || !strings.Contains(err.Error(), "more than 50 files") {
		t.Errorf("many files: %v", err)
	}
	s.put("/escape.tgz", tgz(t, tarEntry{name: "../evil/Chart.yaml", data: []byte("apiVersion: v2\nname: evil\nversion: 1.0.0\n")}))
	if err := get("/escape.tgz"); err == nil || !strings.Contains(err.Error(), "outside its root") {
		t.Errorf("path escape: %v", err)
	}
	s.put("/notachart.tgz", tgz(t, tarEntry{name: "x/README.md", data: []byte("hi")}))
	if err := get("/notachart.tgz"); err == nil || !strings.Contains(err.Error(), "not a Helm chart") {
		t.Errorf("not a chart: %v", err)
	}
}

// TestFetch_CacheKeepsTrustApart: what one GitRepo fetched without TLS
// verification (allowed by configuration) is not handed to another that
// verifies: that one's fetch fails on the untrusted certificate, while a
// GitRepo trusting the server through its CA fetches.
func TestFetch_CacheKeepsTrustApart(t *testing.T) {
	s := newServer(t, true)
	s.serveRepository(t, repoChart{name: "app", version: "1.0.0", archive: chartArchive(t, "app", "1.0.0", nil)})
	f := charts.NewFetcher(charts.Options{})
	h := fleet.HelmOptions{Repo: s.URL, Chart: "app", Version: "1.0.0"}
	if _, err := fetch(t, f, charts.Request{Helm: h, Auth: charts.Auth{InsecureSkipTLSVerify: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(t, f, charts.Request{Helm: h}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a verifying fetch got the insecure fetch's chart: %v", err)
	}
	if _, err := fetch(t, f, charts.Request{Helm: h, Auth: charts.Auth{CABundle: s.caPEM()}}); err != nil {
		t.Errorf("with the CA: %v", err)
	}
}
