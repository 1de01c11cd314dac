package renderservice

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/renderer"
)

// CredentialSource gives the Client the renderer's CA and the bearer token.
type CredentialSource interface {
	// Credentials returns the credentials in force.
	Credentials(ctx context.Context) (*Credentials, error)
	// Refused says the renderer refused the token or its certificate did
	// not verify: the next call to Credentials reads them again.
	Refused()
}

// Resolver gives the addresses ("host:port") the Client dials instead of
// its URL's host (the renderer's pods, say); the renderer's certificate is
// still checked for that host.
type Resolver interface {
	Addresses(ctx context.Context) ([]string, error)
	// Failed says no address could be dialled: read them again.
	Failed()
}

// StaticCredentials is a CredentialSource that never changes.
type StaticCredentials struct{ C *Credentials }

func (s StaticCredentials) Credentials(context.Context) (*Credentials, error) { return s.C, nil }
func (StaticCredentials) Refused()                                            {}

const (
	// attempts is how often the Client tries a render before it reports
	// the renderer unreachable (the reconcile then retries with backoff).
	attempts = 3
	// transferSlack is added to twice the render time limit for the
	// request's deadline: waiting for one of the renderer's workers (when
	// its --concurrency is below the controller's), starting one, moving
	// the Bundle and the manifests.
	transferSlack = 30 * time.Second
)

// Client renders Bundles in the renderer: the controller's
// bundle.BundleRenderer when the renderer runs apart.
type Client struct {
	endpoint string
	creds    CredentialSource
	resolver Resolver // nil: the URL's host
	limits   func() renderworker.Limits
	next     atomic.Uint32 // the address the next connection tries first
	// slots bound the renders in flight to the configured concurrency, as
	// the in-pod pool does.
	slots renderworker.Slots

	mu     sync.Mutex
	ca     []byte
	client *http.Client
}

// NewClient returns a client of the renderer at rendererURL (https) that
// authenticates with creds, dials the addresses resolver gives (nil: the
// URL's host) in turn, and renders within the limits limits returns (read
// at every render).
func NewClient(rendererURL string, creds CredentialSource, resolver Resolver, limits func() renderworker.Limits) (*Client, error) {
	u, err := ParseURL(rendererURL)
	if err != nil {
		return nil, err
	}
	return &Client{endpoint: u.JoinPath(RenderPath).String(), creds: creds, resolver: resolver, limits: limits}, nil
}

// ParseURL checks a renderer URL: https, a host, no user, query or fragment.
func ParseURL(rendererURL string) (*url.URL, error) {
	u, err := url.Parse(rendererURL)
	if err != nil {
		return nil, fmt.Errorf("renderer URL %q: %w", rendererURL, err)
	}
	if u.Scheme != "https" || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("renderer URL %q: want https://host[:port] (Bundle content travels to the renderer: TLS only)", rendererURL)
	}
	return u, nil
}

// Limits returns the limits renders run under now.
func (c *Client) Limits() renderworker.Limits { return c.limits() }

// UnavailableError is a render the renderer did not do (unreachable,
// refusing the controller's credentials, failing): the controller's trouble,
// not the Bundle's.
type UnavailableError struct {
	Endpoint string
	Err      error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("the renderer (%s) is unavailable: %v; the Bundle is not at fault and is rendered again when the renderer answers (is Deployment fleet-renderer running?)", e.Endpoint, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Render renders a Bundle's resources with options in the renderer. A
// failure of the Bundle is a *renderworker.RenderError, as from a Pool;
// anything else (an *UnavailableError, the context's error) is the
// controller's trouble and worth a retry.
func (c *Client) Render(ctx context.Context, name string, resources []fleet.BundleResource, opts fleet.BundleDeploymentOptions) (*renderer.Output, error) {
	return c.RenderFor(ctx, name, resources, opts, nil)
}

// RenderFor is Render for one target cluster: values are the inputs of its
// Helm values (the templates' context, the valuesFrom content), rendered in
// the renderer's worker with the rest of the Bundle.
func (c *Client) RenderFor(ctx context.Context, name string, resources []fleet.BundleResource, opts fleet.BundleDeploymentOptions, values *renderer.ClusterValues) (*renderer.Output, error) {
	lim := c.limits()
	body, err := json.Marshal(request{
		Request: renderworker.Request{Name: name, Resources: resources, Options: opts, Limits: lim.Size, Values: values},
		Bounds:  boundsOf(lim),
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the render request: %w", err)
	}
	if err := c.slots.Acquire(ctx, lim.Concurrency); err != nil {
		return nil, err
	}
	defer c.slots.Release()
	var last error
	for attempt := range attempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(attempt*attempt) * 250 * time.Millisecond):
			}
		}
		out, err, retry := c.try(ctx, lim, body, values != nil)
		if !retry {
			return out, err
		}
		last = err
	}
	return nil, &UnavailableError{Endpoint: c.endpoint, Err: last}
}

// try sends one request; retry says whether another attempt may succeed.
func (c *Client) try(ctx context.Context, lim renderworker.Limits, body []byte, perCluster bool) (_ *renderer.Output, _ error, retry bool) {
	creds, err := c.creds.Credentials(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the renderer's credentials: %w", err), false
	}
	hc, err := c.httpClient(creds.CA)
	if err != nil {
		return nil, err, false
	}
	reqCtx, cancel := context.WithTimeout(ctx, 2*lim.Timeout+transferSlack)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err, false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+creds.Token)
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err(), false // the caller gave up
		}
		if reqCtx.Err() != nil {
			// A renderer that holds a request this long holds the next
			// one as long: the reconcile's backoff is the retry.
			return nil, &UnavailableError{Endpoint: c.endpoint, Err: fmt.Errorf("no answer within %s", 2*lim.Timeout+transferSlack)}, false
		}
		if isCertificateError(err) {
			c.creds.Refused()
		}
		return nil, err, true
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, renderworker.MaxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the renderer's answer: %w", err), true
	}
	if len(raw) > renderworker.MaxResponseBytes {
		return nil, &UnavailableError{Endpoint: c.endpoint, Err: fmt.Errorf("the answer is larger than %d bytes", renderworker.MaxResponseBytes)}, false
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusUnauthorized:
		c.creds.Refused()
		return nil, fmt.Errorf("the renderer refused the controller's token (%s): %s", resp.Status, firstLine(raw)), true
	case resp.StatusCode >= 500:
		return nil, fmt.Errorf("%s: %s", resp.Status, firstLine(raw)), true
	default:
		return nil, &UnavailableError{Endpoint: c.endpoint, Err: fmt.Errorf("%s: %s", resp.Status, firstLine(raw))}, false
	}
	var r response
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("reading the renderer's answer: %w", err), true
	}
	if r.Error != "" {
		return nil, &renderworker.RenderError{Reason: r.Reason, Message: r.Error, MaxRSS: r.MaxRSS}, false
	}
	if perCluster && !r.ValuesResolved {
		// During an upgrade: an older renderer would deploy `${ }` unexpanded.
		return nil, &UnavailableError{Endpoint: c.endpoint, Err: errors.New("the renderer is older than the controller: it does not compute Helm values per cluster (upgrade it with the controller)")}, false
	}
	return &renderer.Output{YAML: r.YAML}, nil, false
}

// httpClient returns the client that trusts ca, made again when ca changes.
func (c *Client) httpClient(ca []byte) (*http.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client != nil && bytes.Equal(c.ca, ca) {
		return c.client, nil
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, errors.New("the renderer's CA bundle holds no certificate")
	}
	if c.client != nil {
		c.client.CloseIdleConnections()
	}
	c.ca = ca
	c.client = &http.Client{Transport: &http.Transport{
		DialContext:         c.dial,
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13},
		MaxIdleConnsPerHost: 64, // bundleRenderConcurrency's maximum
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// The renderer is in the cluster: no proxy from the environment.
		Proxy: nil,
	}}
	return c.client, nil
}

var dialer = &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}

// dial connects to addr, or, with a resolver, to the first of its
// addresses that answers, starting one further at every connection so
// that connections spread over the renderer's replicas.
func (c *Client) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if c.resolver == nil {
		return dialer.DialContext(ctx, network, addr)
	}
	addrs, err := c.resolver.Addresses(ctx)
	if err != nil {
		return nil, err
	}
	first := int(c.next.Add(1))
	var errs []error
	for i := range addrs {
		conn, err := dialer.DialContext(ctx, network, addrs[(first+i)%len(addrs)])
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	c.resolver.Failed()
	return nil, errors.Join(errs...)
}

// isCertificateError reports whether err is the renderer's certificate not
// verifying (renewed since the CA was read, or not the renderer at all).
func isCertificateError(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		verification     *tls.CertificateVerificationError
	)
	return errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verification)
}

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	if len(b) > 512 {
		b = b[:512]
	}
	return string(b)
}
