package proxy_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gitops-fleet/fleet/dev/testenv"
)

// rawUpgrade sends an upgrade request (proto: SPDY/3.1 as a POST, websocket
// as a GET, as kubectl sends them) through the upstream API server as u and
// returns the status and, for a refusal, its message.
func rawUpgrade(t *testing.T, u *user, path, proto string) (int, string) {
	t.Helper()
	pool := u.client.Transport.(*http.Transport).TLSClientConfig.RootCAs
	host := strings.Trim(strings.TrimPrefix(env.Upstream.Config.Host, "https://"), "/")
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", host, &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	method, extra := http.MethodPost, "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n"
	if proto == "websocket" {
		method, extra = http.MethodGet, "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n"
	}
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n%s\r\n", method, path, host, u.token, proto, extra)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return resp.StatusCode, ""
	}
	return status(t, resp)
}

// TestProxy_StreamsNeedCreate (issue 27 finding 6): exec, attach and
// port-forward through the proxy, over SPDY (POST) and WebSocket (GET), need
// create on clusters/proxy: a user with get only is refused by fleet-proxy
// (and still reads), a user with create gets the stream.
func TestProxy_StreamsNeedCreate(t *testing.T) {
	ws := testenv.Namespace(t, env.Upstream.Client, "ws-")
	users := testenv.Namespace(t, env.Upstream.Client, "users-")
	reader, operator := newUser(t, users, "reader"), newUser(t, users, "operator")
	grantVerbs(t, ws, reader.name, []string{"get"}, "c1")
	grantVerbs(t, ws, operator.name, []string{"get", "create"}, "c1")
	connect(t, ws+"/c1")
	for _, u := range []*user{reader, operator} {
		eventuallyStatus(t, u.name+" reading c1", http.StatusOK, func() *http.Response {
			return u.do(t, http.MethodGet, clusterPath(ws, "c1", "/api/v1/namespaces/default/pods"), nil)
		}).Body.Close()
	}
	for _, sub := range []string{"exec?command=sh&stdin=true", "attach?stdin=true", "portforward?ports=8080"} {
		path := clusterPath(ws, "c1", "/api/v1/namespaces/default/pods/web/"+sub)
		for _, proto := range []string{"SPDY/3.1", "websocket"} {
			code, msg := rawUpgrade(t, reader, path, proto)
			if code != http.StatusForbidden || !strings.Contains(msg, "cannot create") {
				t.Errorf("%s over %s with get only: want fleet-proxy's 403 for create, got %d %s", sub, proto, code, msg)
			}
			if code, msg := rawUpgrade(t, operator, path, proto); code != http.StatusSwitchingProtocols {
				t.Errorf("%s over %s with create: want 101, got %d %s", sub, proto, code, msg)
			}
		}
		// Without the upgrade headers too: a GET of exec is no read.
		resp := reader.do(t, http.MethodGet, path, nil)
		if code, msg := status(t, resp); code != http.StatusForbidden {
			t.Errorf("a plain GET of %s with get only: want 403, got %d %s", sub, code, msg)
		}
	}
	// Reading stays a get: logs, a watch.
	for _, p := range []string{"/api/v1/namespaces/default/pods/web/log", "/watch?watch=true"} {
		resp := reader.do(t, http.MethodGet, clusterPath(ws, "c1", p), nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("reader GET %s: %d", p, resp.StatusCode)
		}
	}
}
