package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/gorilla/websocket"
	"github.com/rancher/remotedialer"

	"github.com/gitops-fleet/fleet/internal/registration"
)

// API names of the attach subresource the agents open their tunnel at
// (docs/design/cluster-access.md).
const (
	ProxyGroup   = registration.ProxyAPIGroup
	ProxyVersion = "v1alpha1"
)

// AttachPath is the path of Cluster workspace/name's attach subresource.
func AttachPath(workspace, name string) string {
	return "/apis/" + ProxyGroup + "/" + ProxyVersion + "/namespaces/" + url.PathEscape(workspace) +
		"/clusters/" + url.PathEscape(name) + "/attach"
}

// AttachURL is the WebSocket URL of Cluster workspace/name's attach
// subresource on the upstream API server host (an https:// URL, as in a
// rest.Config).
func AttachURL(host, workspace, name string) (string, error) {
	u, err := url.Parse(host)
	if err != nil {
		return "", fmt.Errorf("upstream address %q: %w", host, err)
	}
	switch u.Scheme {
	case "https", "wss":
		u.Scheme = "wss"
	case "http", "ws":
		u.Scheme = "ws"
	default:
		return "", fmt.Errorf("upstream address %q: scheme is not https", host)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + AttachPath(workspace, name)
	u.RawQuery, u.Fragment = "", ""
	return u.String(), nil
}

// Client is the agent's side of the tunnel: it holds the tunnel open,
// reconnecting with capped, jittered exponential backoff, and serves what
// comes through it from Handler, in process. It dials nothing: the only
// target it accepts is AccessAddress.
type Client struct {
	// URL is the attach WebSocket URL (AttachURL).
	URL string
	// Token returns the agent's current upstream bearer token; it is asked
	// before every attempt, since the agent renews it.
	Token func(context.Context) (string, error)
	// TLS is the upstream's TLS configuration, with the pinned CA.
	TLS *tls.Config
	// Handler serves every request that comes through the tunnel.
	Handler http.Handler

	// MinBackoff and MaxBackoff bound the wait between attempts (full
	// jitter: a random wait up to min(MaxBackoff, MinBackoff·2^n));
	// StableAfter is how long a tunnel must have stayed up for the next
	// attempt to start from MinBackoff again. Defaults: 1 s, 60 s, 60 s.
	MinBackoff, MaxBackoff, StableAfter time.Duration
	// HandshakeTimeout bounds the WebSocket handshake (default 10 s).
	HandshakeTimeout time.Duration
	Log              logr.Logger

	mu        sync.Mutex
	up        bool
	downSince time.Time
	// sessions counts tunnels that came up, for tests and status.
	sessions int
}

// Run holds the tunnel until ctx ends.
func (c *Client) Run(ctx context.Context) error {
	if c.Handler == nil || c.Token == nil || c.URL == "" {
		return errors.New("tunnel client: URL, Token and Handler must be set")
	}
	minB, maxB, stable := orDefault(c.MinBackoff, time.Second), orDefault(c.MaxBackoff, time.Minute), orDefault(c.StableAfter, time.Minute)
	log := c.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	c.mu.Lock()
	if c.downSince.IsZero() {
		c.downSince = time.Now()
	}
	c.mu.Unlock()

	ln := newPipeListener()
	srv := &http.Server{Handler: c.Handler, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()

	dialer := &websocket.Dialer{
		Proxy:            http.ProxyFromEnvironment,
		HandshakeTimeout: orDefault(c.HandshakeTimeout, 10*time.Second),
		TLSClientConfig:  c.TLS,
	}
	local := func(ctx context.Context, network, address string) (net.Conn, error) {
		if !allowed(network, address) {
			return nil, fmt.Errorf("tunnel target %s/%s is not allowed", network, address)
		}
		return ln.dial(ctx)
	}
	attempt := 0
	for {
		started := time.Now()
		err := c.connectOnce(ctx, dialer, local)
		if ctx.Err() != nil {
			return nil
		}
		if c.markDown() && time.Since(started) >= stable {
			attempt = 0
		}
		wait := fullJitter(minB, maxB, attempt)
		attempt++
		log.Error(err, "agent tunnel down, reconnecting", "in", wait.Round(time.Millisecond).String())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (c *Client) connectOnce(ctx context.Context, dialer *websocket.Dialer, local remotedialer.Dialer) error {
	token, err := c.Token(ctx)
	if err != nil {
		return fmt.Errorf("getting the upstream token: %w", err)
	}
	headers := http.Header{"Authorization": []string{"Bearer " + token}}
	return remotedialer.ConnectToProxyWithDialer(ctx, c.URL, headers, allowed, dialer, local,
		func(context.Context, *remotedialer.Session) error {
			c.markUp()
			return nil
		})
}

// allowed is the client's ConnectAuthorizer: the one pseudo address, which
// the local dialer maps to Handler (it checks again and dials nothing real).
// remotedialer ends the whole session on a refused connect; the client then
// connects again. Only a faulty or hostile fleet-proxy asks for another
// address: the Server's transport always dials AccessAddress.
func allowed(network, address string) bool {
	return network == AccessNetwork && address == AccessAddress
}

func (c *Client) markUp() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.up, c.downSince = true, time.Time{}
	c.sessions++
	c.Log.Info("agent tunnel connected", "url", c.URL)
}

// markDown records that the tunnel is down; it reports whether it was up.
func (c *Client) markDown() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.up
	if was || c.downSince.IsZero() {
		c.downSince = time.Now()
	}
	c.up = false
	return was
}

// Connected reports whether the tunnel is up.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up
}

// DownSince is when the tunnel went down (or Run started), and the zero
// time while it is up.
func (c *Client) DownSince() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downSince
}

// DownLongerThan reports whether the tunnel has been down for more than d
// at now: the agent restarts itself then (a stuck network path or load
// balancer that only a new process gets past).
func (c *Client) DownLongerThan(d time.Duration, now time.Time) bool {
	since := c.DownSince()
	return d > 0 && !since.IsZero() && now.Sub(since) > d
}

// Connections is how many times the tunnel came up.
func (c *Client) Connections() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// fullJitter is a random wait in [0, min(max, min·2^attempt)], never less
// than a tenth of min (so a failing upstream is not hammered).
func fullJitter(minB, maxB time.Duration, attempt int) time.Duration {
	ceil := minB
	for i := 0; i < attempt && ceil < maxB; i++ {
		ceil *= 2
	}
	ceil = min(ceil, maxB)
	return max(time.Duration(rand.Int64N(int64(ceil)+1)), minB/10)
}

// pipeListener hands in-memory connections to the http.Server serving
// Handler: the tunnel's streams end here, not on any socket.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
	case <-ctx.Done():
	}
	_ = client.Close()
	_ = server.Close()
	return nil, errors.New("the agent's access handler is not serving")
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return AccessAddress }

// ErrTunnelDown is returned by Watch when the tunnel stayed down too long.
var ErrTunnelDown = errors.New("the agent's tunnel stayed down longer than allowed")

// Watch returns ErrTunnelDown once the tunnel has been down for longer
// than bound (checked every bound/10, at least every second), and nil when
// ctx ends. The agent runs it beside Run and exits on the error, so a
// tunnel that no reconnect brings back (a stuck load balancer or network
// path) gets a new process. bound 0 watches nothing.
func (c *Client) Watch(ctx context.Context, bound time.Duration) error {
	if bound <= 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(min(max(bound/10, 10*time.Millisecond), time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			if c.DownLongerThan(bound, now) {
				return fmt.Errorf("%w (%s, down since %s)", ErrTunnelDown, bound, c.DownSince().UTC().Format(time.RFC3339))
			}
		}
	}
}
