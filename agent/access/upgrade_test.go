package access

import (
	"github.com/go-logr/logr"

	"bufio"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"

	"github.com/gitops-fleet/fleet/internal/assertion"
)

// upgradeRequest sends a raw upgrade request through the handler and
// returns the connection, positioned after the response head, and the
// response.
func (f *fixture) upgradeRequest(id assertion.Identity, method, path string, hdr http.Header) (net.Conn, *bufio.Reader, *http.Response) {
	f.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = conn.Close() })
	req, _ := http.NewRequest(method, f.srv.URL+path, nil)
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	tok, err := f.signer.Sign(id, audience, f.clock())
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set(assertion.HeaderName, tok)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := req.Write(conn); err != nil {
		f.t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		f.t.Fatal(err)
	}
	return conn, br, resp
}

var spdyHeaders = http.Header{
	"Connection":                {"Upgrade"},
	"Upgrade":                   {"SPDY/3.1"},
	"X-Stream-Protocol-Version": {"v4.channel.k8s.io"},
	"Content-Length":            {"0"},
}

var websocketHeaders = http.Header{
	"Connection":             {"Upgrade"},
	"Upgrade":                {"websocket"},
	"Sec-Websocket-Version":  {"13"},
	"Sec-Websocket-Key":      {"dGhlIHNhbXBsZSBub25jZQ=="},
	"Sec-Websocket-Protocol": {"v5.channel.k8s.io"},
}

// TestUpgradeCarriesTheIdentity sends exec upgrades (SPDY and WebSocket)
// to the real API server for a pod that does not exist: a user allowed
// pods/exec gets NotFound, one without gets Forbidden, so the upgrade path
// runs as the asserted user.
func TestUpgradeCarriesTheIdentity(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace("exec-")
	f.grant(ns, rbacv1.Subject{Kind: "User", Name: "fleet:alice"}, []string{"pods/exec", "pods"}, "create", "get")
	path := "/api/v1/namespaces/" + ns + "/pods/nope/exec?command=sh&stdin=true&stdout=true"
	for name, hdr := range map[string]http.Header{"SPDY": spdyHeaders, "WebSocket": websocketHeaders} {
		t.Run(name, func(t *testing.T) {
			method := http.MethodPost
			if name == "WebSocket" {
				method = http.MethodGet
			}
			for user, want := range map[string]int{"alice": http.StatusNotFound, "bob": http.StatusForbidden} {
				_, _, resp := f.upgradeRequest(assertion.Identity{User: user}, method, path, hdr)
				if resp.StatusCode != want {
					b, _ := io.ReadAll(resp.Body)
					t.Errorf("%s: %d, want %d: %s", user, resp.StatusCode, want, b)
				}
			}
			// Impersonate-* is refused on upgrades too.
			h := hdr.Clone()
			h.Set("Impersonate-User", "system:admin")
			if _, _, resp := f.upgradeRequest(assertion.Identity{User: "alice"}, method, path, h); resp.StatusCode != http.StatusBadRequest {
				t.Errorf("with Impersonate-User: %d", resp.StatusCode)
			}
		})
	}
}

// TestUpgradeStreams points the forwarder at a TLS backend that switches
// protocols and echoes, to prove the upgraded stream is bidirectional and
// what the backend receives: the impersonator's token and the identity,
// Connection: Upgrade, and nothing of the inbound credentials.
func TestUpgradeStreams(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var got http.Header
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
		_ = rw.Flush()
		_, _ = io.Copy(conn, rw)
	}))
	backend.StartTLS()
	defer backend.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: backend.Certificate().Raw})
	fwd, err := newForwarder(&rest.Config{Host: backend.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		BearerToken: "the-agents-own-token-never-forwarded"}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	f.h.proxy = fwd
	hdr := spdyHeaders.Clone()
	hdr.Set("Authorization", "Bearer someone-elses")
	hdr.Set("X-Remote-User", "admin")
	conn, br, resp := f.upgradeRequest(assertion.Identity{User: "alice", Groups: []string{"devs"}, UID: "u-1"},
		http.MethodPost, "/api/v1/namespaces/x/pods/y/exec", hdr)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for _, msg := range []string{"ping", "pong"} {
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo %q: %q %v", msg, buf, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	e := f.h.imp.entry("alice")
	e.mu.Lock()
	token := e.token
	e.mu.Unlock()
	for k, want := range map[string]string{
		"Authorization":      "Bearer " + token,
		"Impersonate-User":   "fleet:alice",
		"Impersonate-Group":  "fleet:devs",
		"Impersonate-Uid":    "u-1",
		"Connection":         "Upgrade",
		"Upgrade":            "SPDY/3.1",
		"X-Remote-User":      "",
		assertion.HeaderName: "",
	} {
		if g := got.Get(k); g != want {
			t.Errorf("backend got %s %q, want %q", k, g, want)
		}
	}
	if len(got.Values("Authorization")) != 1 {
		t.Errorf("Authorization headers: %d", len(got.Values("Authorization")))
	}
}

// TestConnectionHeaderReachesTheHandler makes sure the smuggling test
// really sends what it means to: a Go client keeps a Connection header that
// names other headers.
func TestConnectionHeaderReachesTheHandler(t *testing.T) {
	seen := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Get("Connection") }))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Connection", "Impersonate-User")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := <-seen; !strings.Contains(got, "Impersonate-User") {
		t.Errorf("the server saw Connection %q", got)
	}
}

func TestCredentialsFailClosed(t *testing.T) {
	var reached bool
	rt := &credentials{next: roundTripFunc(func(*http.Request) (*http.Response, error) { reached = true; return nil, nil })}
	req, _ := http.NewRequest(http.MethodGet, "https://example.invalid/api", nil)
	if _, err := rt.RoundTrip(req); err == nil || reached {
		t.Errorf("a request without credentials went out (err %v)", err)
	}
	// Headers already on the request are replaced, never added to.
	var out *http.Request
	rt.next = roundTripFunc(func(r *http.Request) (*http.Response, error) { out = r; return &http.Response{}, nil })
	req.Header.Set("Impersonate-User", "system:admin")
	req.Header.Add("Impersonate-Group", "system:masters")
	req.Header.Set("Authorization", "Bearer other")
	req = req.WithContext(withCredentials(req.Context(), &creds{token: "t", id: Downstream{User: "fleet:a", Groups: []string{"fleet:g"},
		Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"c"}}}}))
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if out.Header.Get("Impersonate-User") != "fleet:a" || len(out.Header.Values("Impersonate-Group")) != 1 ||
		out.Header.Get("Authorization") != "Bearer t" ||
		out.Header.Get("Impersonate-Extra-authentication.kubernetes.io%2Fcredential-id") != "c" {
		t.Errorf("headers out: %v", out.Header)
	}
	if req.Header.Get("Authorization") != "Bearer other" {
		t.Error("the round tripper changed its input")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestNames(t *testing.T) {
	id := ImpersonatorID("alice")
	if len(id) != 20 || strings.ToLower(id) != id || strings.ContainsAny(id, "=") {
		t.Errorf("id %q", id)
	}
	if ImpersonatorID("alice") == ImpersonatorID("Alice") {
		t.Error("ids collide")
	}
	d := DownstreamFor(assertion.Identity{User: "system:admin", Groups: []string{"system:masters", "system:authenticated", "b", "b"}})
	if d.User != "fleet:system:admin" || strings.Join(d.Groups, ",") != "fleet:b,fleet:system:masters" {
		t.Errorf("%+v", d)
	}
}
