package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// crashPoint ends an agent at one of its writes to its own cluster, as a
// process killed there would end: the request to write Secret secret with
// method (POST creates, PUT updates, DELETE) fails and the agent's context
// ends (before: it died before the write), or the write succeeds and then
// the context ends (it died right after). Nothing the agent does later
// reaches an API server. It acts from outside the agent, on the connection
// the agent is given (Options.Local).
type crashPoint struct {
	method, secret string
	before         bool

	cancel context.CancelFunc
	once   sync.Once
	hit    chan struct{}
}

func newCrashPoint(method, secret string, before bool) *crashPoint {
	return &crashPoint{method: method, secret: secret, before: before, hit: make(chan struct{})}
}

// config is cfg with the crash point on its connection.
func (c *crashPoint) config(cfg *rest.Config, cancel context.CancelFunc) *rest.Config {
	c.cancel = cancel
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if !c.matches(req) {
				return rt.RoundTrip(req)
			}
			if c.before {
				c.crash()
				return nil, fmt.Errorf("crash point: the agent stops before this write: %w", context.Canceled)
			}
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode < 300 {
				c.crash()
			}
			return resp, err
		})
	})
	return out
}

func (c *crashPoint) crash() {
	c.once.Do(func() {
		c.cancel()
		close(c.hit)
	})
}

// matches: the request writes the Secret (a create names it in its body).
func (c *crashPoint) matches(req *http.Request) bool {
	if req.Method != c.method {
		return false
	}
	if c.method != http.MethodPost {
		return strings.HasSuffix(req.URL.Path, "/secrets/"+c.secret)
	}
	if !strings.HasSuffix(req.URL.Path, "/secrets") || req.Body == nil {
		return false
	}
	// The body is JSON or protobuf, as the client chose: decode it as the
	// API server would, and leave it to be sent.
	raw, err := io.ReadAll(req.Body)
	req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(raw))
	if err != nil {
		return false
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		return false
	}
	m, ok := obj.(metav1.Object)
	return ok && m.GetName() == c.secret
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
