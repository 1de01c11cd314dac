package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/internal/tunnel"
)

// TunnelServer is the tunnel server (internal/tunnel) as fleet-proxy's
// Tunnels and Attacher: agents attach through the upstream API server as
// their request identity, which fleet-proxy has already authenticated
// (requestheader); the identity mapping (tunnel.AuthorizeAttach, reading
// ServiceAccounts, ClusterRegistrations and Clusters from Reader) names the
// one Cluster the caller may hold and the attach URL must name that one.
// Users' requests then dial tunnel.AccessAddress over the Cluster's session.
type TunnelServer struct {
	// Server holds the agents' sessions (its Authenticate is set by
	// NewTunnelServer: use ServeAttach, not Server.ServeHTTP, for attach).
	Server *tunnel.Server
	reader client.Reader
}

var (
	_ Tunnels  = (*TunnelServer)(nil)
	_ Attacher = (*TunnelServer)(nil)
)

// NewTunnelServer makes a tunnel server whose sessions are keyed by the
// Cluster the identity mapping gives. reader reads upstream objects (a
// cache: ServiceAccounts, ClusterRegistrations, Clusters); server, from
// tunnel.NewServer, gets its Authenticate replaced.
func NewTunnelServer(reader client.Reader, server *tunnel.Server) *TunnelServer {
	t := &TunnelServer{Server: server, reader: reader}
	server.Authenticate = t.authenticate
	return t
}

type attachKey struct{}

type attachRequest struct {
	key  string
	user user.Info
}

// ServeAttach hands an authenticated attach request to the tunnel server,
// which asks authenticate (below) for the session key and refuses with 403
// when the caller may hold no tunnel or not this one.
func (t *TunnelServer) ServeAttach(w http.ResponseWriter, r *http.Request, key string, u user.Info) {
	ctx := context.WithValue(r.Context(), attachKey{}, attachRequest{key: key, user: u})
	t.Server.ServeHTTP(w, r.WithContext(ctx))
}

// authenticate is the tunnel server's Authenticate: only requests that
// came through ServeAttach, and only for the Cluster the caller maps to.
func (t *TunnelServer) authenticate(r *http.Request) (string, error) {
	a, ok := r.Context().Value(attachKey{}).(attachRequest)
	if !ok || a.user == nil || a.user.GetName() == "" {
		return "", fmt.Errorf("%w: no authenticated caller", tunnel.ErrNotAnAgent)
	}
	ws, name, ok := strings.Cut(a.key, "/")
	if !ok || ws == "" || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("%w: malformed cluster key %q", tunnel.ErrNotAnAgent, a.key)
	}
	return tunnel.AuthorizeAttach(r.Context(), t.reader, a.user.GetName(), a.user.GetUID(), ws, name)
}

// errNotAgentAddress refuses a dial to anything but the agent's handler.
var errNotAgentAddress = errors.New("fleet-proxy dials only the agent's access handler through a tunnel")

// Dialer dials the agent's handler through the Cluster's session (on this
// replica or a peer); false when no agent of the Cluster is connected.
func (t *TunnelServer) Dialer(key string) (DialFunc, bool) {
	if !t.Server.HasSession(key) {
		return nil, false
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		if network != tunnel.AccessNetwork || address != AgentAddress {
			return nil, fmt.Errorf("%w, not %s/%s", errNotAgentAddress, network, address)
		}
		return t.Server.Dial(ctx, key, tunnel.AccessNetwork, tunnel.AccessAddress)
	}, true
}
