package proxyenv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"

	"github.com/gitops-fleet/fleet/agent/access"
	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/tunnel"
)

// ServingCert makes a self-signed serving certificate for fleet-proxy's
// Service in namespace (the name the aggregator verifies) and for host
// (the address peers and direct clients dial).
func ServingCert(namespace, host string) (certPEM, keyPEM []byte, err error) {
	svc := "fleet-proxy." + namespace + ".svc"
	return certutil.GenerateSelfSignedCertKey(svc, []net.IP{net.ParseIP(host)}, []string{svc})
}

// AgentOptions configure NewAgent.
type AgentOptions struct {
	// Upstream gives the upstream's address and CA; its credentials are
	// not used.
	Upstream *rest.Config
	// Token is the agent's request identity's token (AgentIdentity).
	Token string
	// Workspace and Cluster name the agent's Cluster.
	Workspace, Cluster string
	// Local is the downstream API server the access handler calls.
	Local *rest.Config
	// KeysTimeout bounds the wait for the signing keys through the
	// upstream (default 30 s: the APIService may just have become
	// available).
	KeysTimeout time.Duration
}

// Agent is an agent's side of cluster access as agent.serveAccess wires
// it: a tunnel client serving the access handler. Run Tunnel.Run (and
// Handler.Run for key refreshes and the impersonator GC) to serve.
type Agent struct {
	Tunnel  *tunnel.Client
	Handler *access.Handler
}

// NewAgent reads the signing keys through the upstream as the agent and
// builds its access handler and tunnel client.
func NewAgent(ctx context.Context, o AgentOptions) (*Agent, error) {
	up := &rest.Config{Host: o.Upstream.Host, BearerToken: o.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: o.Upstream.CAData, CAFile: o.Upstream.CAFile}}
	keysFn, err := access.UpstreamKeys(up)
	if err != nil {
		return nil, err
	}
	timeout := o.KeysTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	var ks *assertion.KeySet
	deadline := time.Now().Add(timeout)
	for {
		if ks, err = keysFn(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("signing keys through the upstream: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	h, err := access.New(access.Options{Audience: o.Workspace + "/" + o.Cluster, Verifier: assertion.NewVerifier(ks),
		RefreshKeys: keysFn, Local: rest.CopyConfig(o.Local)})
	if err != nil {
		return nil, err
	}
	c, err := TunnelClient(up, o.Workspace, o.Cluster, h)
	if err != nil {
		return nil, err
	}
	return &Agent{Tunnel: c, Handler: h}, nil
}

// TunnelClient is a tunnel client of Cluster workspace/cluster that
// authenticates with up's bearer token, serves handler and reconnects
// quickly (local control planes: a refused attempt is soon worth another).
func TunnelClient(up *rest.Config, workspace, cluster string, handler http.Handler) (*tunnel.Client, error) {
	u, err := tunnel.AttachURL(up.Host, workspace, cluster)
	if err != nil {
		return nil, err
	}
	tlsConfig, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: up.TLSClientConfig})
	if err != nil {
		return nil, err
	}
	token := up.BearerToken
	return &tunnel.Client{
		URL:        u,
		Token:      func(context.Context) (string, error) { return token, nil },
		TLS:        tlsConfig,
		Handler:    handler,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second,
		// Many tunnels connecting at once on a small machine.
		HandshakeTimeout: 30 * time.Second,
	}, nil
}
