package tunnel_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gitops-fleet/fleet/dev/testenv"
)

const peerToken = "peer-token-0123456789-0123456789-abcdef"

func (u *upstream) peerURL() string { return "wss://" + u.addr + "/peer" }

// TestPeering: an agent connected to replica B is reached through replica
// A, over a peer connection that verifies B's certificate and carries the
// shared token; callers without it get no peer session.
func TestPeering(t *testing.T) {
	b := newUpstream(t, "", nil)
	a := newUpstream(t, "", b.cert) // replicas share the serving certificate
	if err := a.server.EnablePeering("a", peerToken, a.tls()); err != nil {
		t.Fatal(err)
	}
	if err := b.server.EnablePeering("b", peerToken, b.tls()); err != nil {
		t.Fatal(err)
	}
	if err := a.server.EnablePeering("a", "short", a.tls()); err == nil {
		t.Error("EnablePeering accepted a short token")
	}
	a.server.SetPeers(map[string]string{"b": b.peerURL(), "a": a.peerURL()})
	b.server.SetPeers(map[string]string{"a": a.peerURL()})

	_, stop := b.agent(t, "agent-on-b", "token-a")
	waitSessions(t, b, 1)
	testenv.Eventually(t, 20*time.Second, "replica A to reach the agent through B", func() error {
		rt, ok := a.server.RoundTripper(key)
		if !ok {
			return fmt.Errorf("no session on A")
		}
		got, err := get(rt, "/via-peer")
		if err != nil {
			return err
		}
		if got != "agent-on-b GET /via-peer" {
			return fmt.Errorf("answer %q", got)
		}
		return nil
	})
	if a.server.Sessions(key) != 0 {
		t.Error("A counts the peer's agent as its own session")
	}

	// Callers that are not peers.
	dialer := &websocket.Dialer{TLSClientConfig: b.tls(), HandshakeTimeout: 5 * time.Second}
	for what, h := range map[string]http.Header{
		"a known peer id with a wrong token": {"X-API-Tunnel-ID": {"a"}, "X-API-Tunnel-Token": {"wrong-token-0123456789-0123456789-abc"}},
		"an unknown peer id with the token":  {"X-API-Tunnel-ID": {"z"}, "X-API-Tunnel-Token": {peerToken}},
		"no headers":                         {},
	} {
		ws, resp, err := dialer.Dial(b.peerURL(), h)
		if err == nil {
			ws.Close()
			t.Errorf("%s: peer connection accepted", what)
			continue
		}
		if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %v, want 401", what, err)
		}
	}
	// The attach path ignores peer headers: the caller must authenticate.
	url := "wss://" + b.addr + "/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/fleet-default/clusters/cluster-a/attach"
	if ws, resp, err := dialer.Dial(url, http.Header{"X-API-Tunnel-ID": {"a"}, "X-API-Tunnel-Token": {peerToken}}); err == nil {
		ws.Close()
		t.Error("attach accepted peer headers")
	} else if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("attach with peer headers: %v, want 403", err)
	}
	if n := testutil.ToFloat64(counter(t, b.reg, "fleet_proxy_tunnel_refused_total")); n < 4 {
		t.Errorf("refused counter %v", n)
	}

	// The agent goes: A loses the cluster too.
	stop()
	testenv.Eventually(t, 20*time.Second, "replica A to see the agent gone", func() (bool, error) {
		_, ok := a.server.RoundTripper(key)
		return !ok && !a.server.HasSession(key), nil
	})
}
