package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/internal/scheme"
	"github.com/gitops-fleet/fleet/internal/tunnel"
	"github.com/gitops-fleet/fleet/proxy/connected"
)

// TunnelServer is the tunnel server (internal/tunnel) as fleet-proxy's
// Tunnels and Attacher: agents attach through the upstream API server as
// their request identity, which fleet-proxy has already authenticated
// (requestheader); the identity mapping (tunnel.AuthorizeAttach, reading
// ServiceAccounts, ClusterRegistrations and Clusters from Reader) names the
// one Cluster the caller may hold and the attach URL must name that one.
// Users' requests then dial tunnel.AccessAddress over the Cluster's session.
type TunnelServer struct {
	// Server holds the agents' sessions (use ServeAttach, not
	// Server.ServeHTTP, for attach).
	Server *tunnel.Server
	reader client.Reader
}

var (
	_ Tunnels  = (*TunnelServer)(nil)
	_ Attacher = (*TunnelServer)(nil)
)

// TunnelOptions configure NewTunnelServer.
type TunnelOptions struct {
	// Observer is told of agents' sessions starting and ending (the
	// Connected condition's connected.Changes; nil: nobody).
	Observer tunnel.Observer
	// Registerer gets the tunnel metrics (nil: none).
	Registerer prometheus.Registerer
	Log        logr.Logger
}

// NewTunnelServer makes a tunnel server whose sessions are keyed by the
// Cluster the identity mapping gives. reader reads upstream objects (a
// cache: ServiceAccounts, ClusterRegistrations, Clusters).
func NewTunnelServer(reader client.Reader, o TunnelOptions) (*TunnelServer, error) {
	ts, err := tunnel.NewServer(tunnel.ServerOptions{Authenticate: authenticateAttach(reader),
		Observer: o.Observer, Registerer: o.Registerer, Log: o.Log})
	if err != nil {
		return nil, err
	}
	return &TunnelServer{Server: ts, reader: reader}, nil
}

type attachKey struct{}

type attachRequest struct {
	key  string
	user user.Info
}

// ServeAttach hands an authenticated attach request to the tunnel server,
// which asks authenticateAttach (below) for the session key and refuses
// with 403 when the caller may hold no tunnel or not this one.
func (t *TunnelServer) ServeAttach(w http.ResponseWriter, r *http.Request, key string, u user.Info) {
	ctx := context.WithValue(r.Context(), attachKey{}, attachRequest{key: key, user: u})
	t.Server.ServeHTTP(w, r.WithContext(ctx))
}

// authenticateAttach is the tunnel server's Authenticate: only requests
// that came through ServeAttach, and only for the Cluster the caller maps
// to (reading reader).
func authenticateAttach(reader client.Reader) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		a, ok := r.Context().Value(attachKey{}).(attachRequest)
		if !ok || a.user == nil || a.user.GetName() == "" {
			return "", fmt.Errorf("%w: no authenticated caller", tunnel.ErrNotAnAgent)
		}
		ws, name, ok := strings.Cut(a.key, "/")
		if !ok || ws == "" || name == "" || strings.Contains(name, "/") {
			return "", fmt.Errorf("%w: malformed cluster key %q", tunnel.ErrNotAnAgent, a.key)
		}
		return tunnel.AuthorizeAttach(r.Context(), reader, a.user.GetName(), a.user.GetUID(), ws, name)
	}
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

// newIdentityCache makes a read-only cache of what tunnel.ClusterForIdentity
// reads (fleet-proxy's RBAC: get, list, watch on exactly these);
// startCache fills it. ServiceAccounts are cached only when they carry a
// registration's label: every request identity does. Its informers tell
// RecheckOnChange when an identity may have lost its tunnel.
func newIdentityCache(cfg *rest.Config) (cache.Cache, error) {
	hasRegistration, err := labels.NewRequirement(registration.RegistrationLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	c, err := cache.New(cfg, cache.Options{
		Scheme: scheme.Scheme,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ServiceAccount{}: {Label: labels.NewSelector().Add(*hasRegistration)},
		},
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		return nil, err
	}
	// The informers exist before the cache starts (an informer is not
	// made on a read: ReaderFailOnMissingInformer).
	for _, o := range identityObjects() {
		if _, err := c.GetInformer(context.Background(), o); err != nil {
			return nil, fmt.Errorf("watching %T: %w", o, err)
		}
	}
	return c, nil
}

func identityObjects() []client.Object {
	return []client.Object{&corev1.ServiceAccount{}, &fleet.ClusterRegistration{}, &fleet.Cluster{}}
}

// startCache starts c until ctx ends and waits (two minutes at most) for
// it to fill.
func startCache(ctx context.Context, c cache.Cache) error {
	go func() { _ = c.Start(ctx) }()
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !c.WaitForCacheSync(syncCtx) {
		return errors.New("the cache of ServiceAccounts, ClusterRegistrations and Clusters did not fill")
	}
	return nil
}

// RecheckOnChange closes the agents' sessions whose identity may no longer
// hold them (tunnel.Server.Recheck): after a request ServiceAccount, a
// ClusterRegistration or a Cluster is deleted or changes in what the
// identity mapping reads, and every period, until ctx ends. identities is
// the identity cache the TunnelServer reads.
func (t *TunnelServer) RecheckOnChange(ctx context.Context, identities cache.Informers, period time.Duration) error {
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default: // a recheck is already due
		}
	}
	// Additions revoke nothing; Clusters change status often, and only
	// their namespace and deletion matter here.
	handler := toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			if o, ok := oldObj.(*fleet.Cluster); ok {
				n, _ := newObj.(*fleet.Cluster)
				if n != nil && o.Status.Namespace == n.Status.Namespace && o.DeletionTimestamp.IsZero() == n.DeletionTimestamp.IsZero() {
					return
				}
			}
			signal()
		},
		DeleteFunc: func(any) { signal() },
	}
	for _, o := range identityObjects() {
		inf, err := identities.GetInformer(ctx, o)
		if err != nil {
			return fmt.Errorf("watching %T: %w", o, err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	go t.Server.RecheckLoop(ctx, period, changed)
	return nil
}

var _ AgentAuthorizer = (*TunnelServer)(nil)

// AuthorizeAgent is nil when u is the request identity of Cluster ws/name's
// agent (the mapping attach uses).
func (t *TunnelServer) AuthorizeAgent(ctx context.Context, u user.Info, ws, name string) error {
	if u == nil || u.GetName() == "" {
		return fmt.Errorf("%w: no authenticated caller", tunnel.ErrNotAnAgent)
	}
	_, err := tunnel.AuthorizeAttach(ctx, t.reader, u.GetName(), u.GetUID(), ws, name)
	return err
}

// DirectEndpoint is the direct endpoint of Cluster ws/name (from the
// cache): an error for a Cluster that does not exist, has no direct
// endpoint (wrapping ErrNoDirectEndpoint) or whose agent has not reported
// the endpoint's CA yet.
func (t *TunnelServer) DirectEndpoint(ctx context.Context, ws, name string) (proxyv1.DirectEndpoint, error) {
	c := &fleet.Cluster{}
	if err := t.reader.Get(ctx, client.ObjectKey{Namespace: ws, Name: name}, c); err != nil {
		return proxyv1.DirectEndpoint{}, fmt.Errorf("reading Cluster %s/%s: %w", ws, name, err)
	}
	if c.Spec.AgentDirectEndpoint == nil || c.Spec.AgentDirectEndpoint.URL == "" {
		return proxyv1.DirectEndpoint{}, fmt.Errorf("%w: Cluster %s/%s has no spec.agentDirectEndpoint: set its url (docs/operations.md, \"Direct access\")", ErrNoDirectEndpoint, ws, name)
	}
	if c.Status.Agent.DirectEndpointCA == "" {
		return proxyv1.DirectEndpoint{}, fmt.Errorf("the agent of Cluster %s/%s has not reported its direct endpoint's CA yet (status.agent.directEndpointCA): wait for the agent with the endpoint to run", ws, name)
	}
	return proxyv1.DirectEndpoint{URL: c.Spec.AgentDirectEndpoint.URL, CABundle: c.Status.Agent.DirectEndpointCA,
		CertificateNames: c.Status.Agent.DirectEndpointCertificateNames}, nil
}

// justRegistered is how long after its Cluster turned Ready an agent's
// tunnel is expected: a request in that window gets a Retry-After.
const justRegistered = 30 * time.Second

// NotConnected says why Cluster key ("<ws>/<name>") holds no tunnel, from
// the cache.
func (t *TunnelServer) NotConnected(ctx context.Context, key string) (string, int) {
	ws, name, _ := strings.Cut(key, "/")
	c := &fleet.Cluster{}
	if err := t.reader.Get(ctx, client.ObjectKey{Namespace: ws, Name: name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			c = nil
		} else {
			return fmt.Sprintf("its Cluster could not be read (%v)", err), 0
		}
	}
	return notConnected(c, time.Now())
}

// notConnected is why Cluster c (nil: none) holds no tunnel at now, and
// the Retry-After for a tunnel that is about to open.
func notConnected(c *fleet.Cluster, now time.Time) (string, int) {
	if c == nil {
		return "there is no such Cluster", 0
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConnectedCondition); cond != nil {
		if cond.Status == metav1.ConditionTrue {
			// A replica wrote True and this one reaches none holding it:
			// the tunnel just went (the condition follows after a grace),
			// or the replicas do not reach each other.
			return fmt.Sprintf("no fleet-proxy replica this one reaches holds its tunnel (the Cluster says: %s; if that lasts, check fleet-proxy's peering)", cond.Message), 1
		}
		return cond.Message, 0
	}
	ready := meta.FindStatusCondition(c.Status.Conditions, fleet.ReadyCondition)
	switch {
	case ready == nil:
		return "its agent has not registered yet", 0
	case ready.Status != metav1.ConditionTrue:
		return fmt.Sprintf("its agent has not registered yet or is offline (Ready=%s, %s: %s)", ready.Status, ready.Reason, ready.Message), 0
	case now.Sub(ready.LastTransitionTime.Time) < justRegistered:
		return "its agent has just registered and is opening its tunnel: try again in a moment", 1
	default:
		return fmt.Sprintf("its agent has reported in since %s but has not opened a tunnel: check that the agent runs with cluster access (chart value access.enabled, flag --access) and its logs in namespace %s of the cluster",
			ready.LastTransitionTime.UTC().Format(time.RFC3339), connected.AgentNamespace(c)), 0
	}
}
