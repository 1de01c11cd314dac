package registration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	"github.com/gitops-fleet/fleet/dev/controlplane"
)

// write is one write a controller made to the API server.
type write struct {
	verb, resource, subresource, namespace, name string
	// grants: a status write of a ClusterRegistration that records it
	// granted.
	grants bool
	// dryRun: a dry run, which changes nothing (not counted).
	dryRun bool
}

func (w write) String() string {
	s := w.verb + " " + w.resource
	if w.subresource != "" {
		s += "/" + w.subresource
	}
	if w.namespace != "" {
		s += " " + w.namespace + "/" + w.name
	} else {
		s += " " + w.name
	}
	if w.grants {
		s += " (granted)"
	}
	if w.dryRun {
		s += " (dry run)"
	}
	return s
}

// writeLog watches one controller process from outside, on the connection
// it is given (its manager's rest.Config and the clientset built from it):
// it records every write that reached the API server, and can end the
// process at its n-th write as a kill would, right after that write
// returned. Leases and events are not counted, nor dry runs and refused
// writes (they change nothing); sent lists those too.
type writeLog struct {
	// before, when set, is called before each counted write is sent; it
	// may block, holding the writer there.
	before func(write)
	// killAt > 0 ends the process right after its killAt-th write: cancel
	// (the manager's context) is called and every later request of the
	// process fails, as nothing a killed process does reaches an API
	// server.
	killAt int
	cancel context.CancelFunc
	// killed is closed at the kill.
	killed chan struct{}

	mu     sync.Mutex
	writes []write
	// sent are the write requests the process sent, dry runs and refused
	// ones included (leases and events not).
	sent []write
	dead bool
}

func newWriteLog(killAt int, cancel context.CancelFunc) *writeLog {
	return &writeLog{killAt: killAt, cancel: cancel, killed: make(chan struct{})}
}

// config is cfg with the log on its connection.
func (l *writeLog) config(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) { return l.roundTrip(rt, req) })
	})
	return out
}

func (l *writeLog) roundTrip(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	if l.isDead() {
		return nil, fmt.Errorf("the controller was killed: %w", context.Canceled)
	}
	w, ok := writeOf(req)
	if !ok {
		return rt.RoundTrip(req)
	}
	if l.before != nil && !w.dryRun {
		l.before(w)
	}
	l.mu.Lock()
	l.sent = append(l.sent, w)
	l.mu.Unlock()
	resp, err := rt.RoundTrip(req)
	if err != nil || resp.StatusCode >= 300 || w.dryRun {
		return resp, err
	}
	l.mu.Lock()
	l.writes = append(l.writes, w)
	kill := !l.dead && len(l.writes) == l.killAt
	if kill {
		l.dead = true
	}
	l.mu.Unlock()
	if kill {
		l.cancel()
		close(l.killed)
	}
	return resp, nil
}

func (l *writeLog) isDead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// seen returns the writes that reached the API server, in order.
func (l *writeLog) seen() []write {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.writes)
}

// attempts returns every write request the process sent, in order: dry
// runs and writes the API server refused too.
func (l *writeLog) attempts() []write {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sent)
}

// has says whether a write matching f reached the API server.
func (l *writeLog) has(f func(write) bool) bool {
	return slices.ContainsFunc(l.seen(), f)
}

var (
	requestInfo = &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	// decoder reads a create's body, JSON or protobuf, as the API server
	// would.
	decoder = serializer.NewCodecFactory(controlplane.Scheme).UniversalDeserializer()
)

// writeOf says whether req is a write request (leases and events aside),
// and which.
func writeOf(req *http.Request) (write, bool) {
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return write{}, false
	}
	info, err := requestInfo.NewRequestInfo(req)
	if err != nil || !info.IsResourceRequest || info.Resource == "leases" || info.Resource == "events" {
		return write{}, false
	}
	w := write{verb: info.Verb, resource: info.Resource, subresource: info.Subresource, namespace: info.Namespace, name: info.Name,
		dryRun: req.URL.Query().Has("dryRun")}
	needName := w.name == "" && w.verb == "create"
	isStatus := w.resource == "clusterregistrations" && w.subresource == "status"
	if !needName && !isStatus || req.Body == nil {
		return w, true
	}
	// The body is read and left to be sent.
	raw, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(raw))
	if err != nil {
		return w, true
	}
	if needName {
		if obj, _, err := decoder.Decode(raw, nil, nil); err == nil {
			if m, ok := obj.(metav1.Object); ok {
				w.name = m.GetName()
			}
		}
	}
	if isStatus {
		// A merge patch (reconciler.StatusPatcher) or a whole object.
		var body struct {
			Status struct {
				Granted bool `json:"granted"`
			} `json:"status"`
		}
		w.grants = json.Unmarshal(raw, &body) == nil && body.Status.Granted
	}
	return w, true
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
