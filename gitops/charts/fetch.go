package charts

import (
	"container/list"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Chart is a fetched chart. A Fetcher shares one Chart between every
// caller asking for it: treat it as read-only.
type Chart struct {
	// Name and Version are the chart's, from its Chart.yaml.
	Name, Version string
	// Digest is the sha256 of the archive: "sha256:<hex>".
	Digest string
	// Files are the archive's files by path as the archive names them:
	// `<chart>/Chart.yaml`, `<chart>/templates/…`.
	Files map[string][]byte
	// Size is the archive's size in bytes.
	Size int64
}

// Options configure a Fetcher. Zero fields take the defaults.
type Options struct {
	Limits Limits
	// Timeout bounds one Fetch, every request included (default 2 min).
	Timeout time.Duration
	// IndexTTL is how long a repository's index.yaml is reused (default
	// 1 min: one scan of a repository's paths reads it once).
	IndexTTL time.Duration
	// CacheBytes bounds the archives the cache keeps (default 256 MiB),
	// the least recently used going first.
	CacheBytes int64
	// Transport is the base transport (default: a clone of
	// http.DefaultTransport); tests may count requests with it.
	Transport *http.Transport
}

// Fetcher fetches charts; one per source component, shared by every
// GitRepo, so a chart many Bundles name is fetched once. Safe for
// concurrent use.
type Fetcher struct {
	opts   Options
	flight singleflight.Group

	mu      sync.Mutex
	charts  map[string]*list.Element // cacheKey → *cached, in lru
	lru     *list.List               // front: most recently used
	size    int64
	indexes map[string]cachedIndex
	// resolved maps an OCI manifest digest (per credential identity) to the
	// chart's cache key, so a tag resolved again costs one request.
	resolved map[string]string
}

type cached struct {
	key   string
	chart *Chart
}

type cachedIndex struct {
	index *repo.IndexFile
	at    time.Time
}

// NewFetcher returns a Fetcher with the options' defaults filled in.
func NewFetcher(opts Options) *Fetcher {
	opts.Limits = opts.Limits.withDefaults()
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	if opts.IndexTTL <= 0 {
		opts.IndexTTL = time.Minute
	}
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = 256 << 20
	}
	if opts.Transport == nil {
		opts.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	return &Fetcher{opts: opts, charts: map[string]*list.Element{}, lru: list.New(), indexes: map[string]cachedIndex{}, resolved: map[string]string{}}
}

// Request is one chart to fetch.
type Request struct {
	// Helm are the options as the fleet.yaml (or a target of it) writes
	// them: chart, repo, version.
	Helm fleet.HelmOptions
	// Auth is the GitRepo's helmSecretName Secret, read by
	// AuthFromSecretData; zero for none.
	Auth Auth
	// URLRegex is the GitRepo's helmRepoURLRegex: the credentials go only
	// to references it matches (empty: nowhere).
	URLRegex string
}

// Fetch resolves the request's chart reference and returns the chart, from
// the cache when it holds the same archive for the same credentials.
// Errors name the chart (never a credential).
func (f *Fetcher) Fetch(ctx context.Context, req Request) (*Chart, error) {
	ref, err := ParseRef(req.Helm)
	if err != nil {
		return nil, err
	}
	pol, err := newPolicy(ref, req.Auth, req.URLRegex)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	s := &session{f: f, ref: ref, auth: req.Auth, policy: pol}
	if s.client, err = f.httpClient(req.Auth, pol, ref.Kind != OCI); err != nil {
		return nil, err
	}
	// Charts and indexes fetched with credentials are cached apart from
	// those fetched without, so a GitRepo never gets a chart it could not
	// fetch itself; and apart by how the server was trusted, so what a
	// GitRepo fetched without TLS verification (or with its own CA) never
	// serves one that verifies.
	s.identity = req.Auth.trust()
	if pol.enabled {
		s.identity += "|" + req.Auth.identity()
	}
	var ch *Chart
	switch ref.Kind {
	case Repository:
		ch, err = s.fromRepository(ctx)
	case OCI:
		ch, err = s.fromOCI(ctx)
	default:
		ch, err = s.fromURL(ctx, ref.Location, "")
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, context.Canceled) {
			return nil, fmt.Errorf("%s: not fetched within %s: %w", ref, f.opts.Timeout, err)
		}
		return nil, err
	}
	return ch, nil
}

// session is one Fetch: the reference, its credentials and client.
type session struct {
	f        *Fetcher
	ref      Ref
	auth     Auth
	policy   policy
	identity string
	client   *http.Client
}

func (f *Fetcher) httpClient(a Auth, pol policy, addBasic bool) (*http.Client, error) {
	t := f.opts.Transport.Clone()
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: a.InsecureSkipTLSVerify} //nolint:gosec // only when the configuration allows it (AuthFromSecretData)
	if len(a.CABundle) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		pool.AppendCertsFromPEM(a.CABundle)
		t.TLSClientConfig.RootCAs = pool
	}
	return &http.Client{
		Transport: &gate{base: t, policy: pol, auth: a, addBasic: addBasic},
		Timeout:   f.opts.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("stopped after 5 redirects")
			}
			return nil
		},
	}, nil
}

// fromRepository reads the repository's index, picks the version and
// fetches its archive, unless the cache has the digest the index gives.
func (s *session) fromRepository(ctx context.Context) (*Chart, error) {
	index, err := s.index(ctx)
	if err != nil {
		return nil, err
	}
	cv, err := index.Get(s.ref.Name, s.ref.Version)
	if err != nil {
		return nil, s.notFound(index)
	}
	if len(cv.URLs) == 0 {
		return nil, fmt.Errorf("%s: the repository's index lists version %s without a URL", s.ref, cv.Version)
	}
	u, err := resolveURL(s.ref.Location, cv.URLs[0])
	if err != nil {
		return nil, fmt.Errorf("%s: the index's URL %q for version %s: %v", s.ref, cv.URLs[0], cv.Version, err)
	}
	return s.fromURL(ctx, u, strings.ToLower(cv.Digest))
}

// notFound says what the repository has instead.
func (s *session) notFound(index *repo.IndexFile) error {
	versions := index.Entries[s.ref.Name]
	if len(versions) == 0 {
		return &NotFoundError{Chart: s.ref.String(), Detail: fmt.Sprintf("the repository has no chart %q", s.ref.Name)}
	}
	var have []string
	for i, v := range versions {
		if i == 10 {
			have = append(have, "…")
			break
		}
		have = append(have, v.Version)
	}
	return &NotFoundError{Chart: s.ref.String(), Detail: "no version matches; the repository has " + strings.Join(have, ", ")}
}

// NotFoundError: the repository or registry has no such chart or version.
type NotFoundError struct{ Chart, Detail string }

func (e *NotFoundError) Error() string { return e.Chart + ": not found: " + e.Detail }

// index returns the repository's index.yaml, read at most once per
// IndexTTL per repository and credentials.
func (s *session) index(ctx context.Context) (*repo.IndexFile, error) {
	key := s.identity + "|" + s.ref.Location
	s.f.mu.Lock()
	c, ok := s.f.indexes[key]
	s.f.mu.Unlock()
	if ok && time.Since(c.at) < s.f.opts.IndexTTL {
		return c.index, nil
	}
	v, err, _ := s.f.flight.Do("index|"+key, func() (any, error) {
		// A fetch that finished just before this one started left it.
		s.f.mu.Lock()
		c, ok := s.f.indexes[key]
		s.f.mu.Unlock()
		if ok && time.Since(c.at) < s.f.opts.IndexTTL {
			return c.index, nil
		}
		u, err := url.JoinPath(s.ref.Location, "index.yaml")
		if err != nil {
			return nil, fmt.Errorf("%s: %v", s.ref, err)
		}
		data, _, err := s.get(ctx, u, s.f.opts.Limits.Index)
		if errors.Is(err, errBound) {
			return nil, &TooLargeError{Chart: s.ref.String(), What: "index", Limit: s.f.opts.Limits.Index}
		}
		if err != nil {
			return nil, err
		}
		var index repo.IndexFile
		if err := yaml.Unmarshal(data, &index); err != nil {
			return nil, fmt.Errorf("%s: the repository's index.yaml does not parse: %v", s.ref, err)
		}
		index.SortEntries()
		s.f.mu.Lock()
		s.f.indexes[key] = cachedIndex{index: &index, at: time.Now()}
		s.f.mu.Unlock()
		return &index, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*repo.IndexFile), nil
}

// fromURL fetches an archive; with the digest the index gives, the cache
// may answer without a request, and the archive must match it.
func (s *session) fromURL(ctx context.Context, u, digest string) (*Chart, error) {
	if digest != "" {
		if ch := s.f.cached(s.identity + "|sha256:" + digest); ch != nil {
			return ch, nil
		}
	}
	v, err, _ := s.f.flight.Do("url|"+s.identity+"|"+u+"|"+digest, func() (any, error) {
		if digest != "" {
			if ch := s.f.cached(s.identity + "|sha256:" + digest); ch != nil {
				return ch, nil
			}
		}
		data, size, err := s.get(ctx, u, s.f.opts.Limits.Archive)
		if errors.Is(err, errBound) {
			return nil, &TooLargeError{Chart: s.ref.String(), What: "archive", Size: size, Limit: s.f.opts.Limits.Archive}
		}
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); digest != "" && got != digest {
			return nil, fmt.Errorf("%s: the archive's sha256 is %s, the repository's index says %s", s.ref, got, digest)
		}
		return s.f.add(s.ref.String(), s.identity, data, s.f.opts.Limits)
	})
	if err != nil {
		return nil, err
	}
	return v.(*Chart), nil
}

// get reads a URL within limit bytes. Past it: errBound, with the size
// the server announced (or what was read).
func (s *session) get(ctx context.Context, u string, limit int64) ([]byte, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %v", s.ref, err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %v", s.ref, redactErr(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, s.statusError(resp.StatusCode, resp.Request.URL)
	}
	if resp.ContentLength > limit {
		return nil, resp.ContentLength, errBound
	}
	data, err := readAtMost(resp.Body, limit)
	if errors.Is(err, errBound) {
		return nil, 0, err // the size is not known: reading stopped
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%s: reading %s: %v", s.ref, redactURL(resp.Request.URL), err)
	}
	return data, int64(len(data)), nil
}

// statusError words an HTTP refusal, saying why credentials were not sent
// when that is the likely cause.
func (s *session) statusError(code int, u *url.URL) error {
	msg := fmt.Sprintf("%s: %s answered %d %s", s.ref, redactURL(u), code, http.StatusText(code))
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		switch {
		case !s.auth.hasCredentials():
			msg += "; the GitRepo gives no Helm credentials (helmSecretName)"
		case !s.policy.enabled:
			msg += "; the Helm credentials were not sent: the GitRepo's helmRepoURLRegex does not match " + strings.TrimSuffix(s.ref.written, "/")
		case !s.policy.allows(u):
			msg += "; the Helm credentials were not sent to " + redactURL(u) + ": they go to the reference's own host, or to URLs helmRepoURLRegex matches"
		}
	}
	if code == http.StatusNotFound {
		return &NotFoundError{Chart: s.ref.String(), Detail: redactURL(u) + " answered 404 Not Found"}
	}
	return errors.New(msg)
}

func redactURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User("xxxxx")
	}
	c.RawQuery = ""
	return c.String()
}

// redactErr drops URLs' user information and queries from a url.Error.
func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			return fmt.Errorf("%s %s: %v", ue.Op, redactURL(u), ue.Err)
		}
	}
	return err
}

func resolveURL(base, ref string) (string, error) {
	r, err := url.Parse(ref)
	if err != nil {
		return "", err
	}
	if r.IsAbs() {
		return ref, nil
	}
	b, err := url.Parse(strings.TrimSuffix(base, "/") + "/")
	if err != nil {
		return "", err
	}
	return b.ResolveReference(r).String(), nil
}

// add extracts an archive and caches it by digest (per credential
// identity).
func (f *Fetcher) add(what, identity string, data []byte, l Limits) (*Chart, error) {
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	key := identity + "|" + digest
	if ch := f.cached(key); ch != nil {
		return ch, nil
	}
	files, meta, err := extract(what, data, l)
	if err != nil {
		return nil, err
	}
	ch := &Chart{Name: meta.Name(), Version: meta.Metadata.Version, Digest: digest, Files: files, Size: int64(len(data))}
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.charts[key]; ok {
		return e.Value.(*cached).chart, nil
	}
	f.charts[key] = f.lru.PushFront(&cached{key: key, chart: ch})
	f.size += chartCost(ch)
	for f.size > f.opts.CacheBytes && f.lru.Len() > 1 {
		old := f.lru.Back()
		c := old.Value.(*cached)
		f.lru.Remove(old)
		delete(f.charts, c.key)
		f.size -= chartCost(c.chart)
	}
	return ch, nil
}

func (f *Fetcher) cached(key string) *Chart {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.charts[key]
	if !ok {
		return nil
	}
	f.lru.MoveToFront(e)
	return e.Value.(*cached).chart
}

// chartCost: the cache holds the extracted files.
func chartCost(ch *Chart) int64 {
	var n int64
	for name, data := range ch.Files {
		n += int64(len(name) + len(data))
	}
	return n
}
