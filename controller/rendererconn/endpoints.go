package rendererconn

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/internal/endpoints"
	"github.com/gitops-fleet/fleet/internal/renderservice"
)

// endpointsFor is how long the ready endpoints read are used before they
// are read again (at once after a failed dial).
const endpointsFor = 10 * time.Second

// Endpoints are the ready addresses of the renderer's Service, read from its
// EndpointSlices, as the API server's aggregator and fleet-proxy's peers
// find pods: the controller reaches the renderer without cluster DNS or a
// service proxy, and spreads its renders over the renderer's replicas
// (kept-alive connections to a Service address would all stay on one).
type Endpoints struct {
	// Reader lists EndpointSlices (the API server: they are not cached).
	Reader             client.Reader
	Namespace, Service string

	mu     sync.Mutex
	addrs  []string
	readAt time.Time
}

var _ renderservice.Resolver = &Endpoints{}

// serviceHost is a Service's in-cluster name: <service>.<namespace>.svc,
// optionally with the cluster domain.
var serviceHost = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc(\.cluster\.local)?$`)

// EndpointsOf returns the Endpoints of the Service a renderer URL's host
// names (<service>.<namespace>.svc), or nil when it names none (an IP
// address or another name: dialled as it is).
func EndpointsOf(r client.Reader, host string) *Endpoints {
	m := serviceHost.FindStringSubmatch(host)
	if m == nil {
		return nil
	}
	return &Endpoints{Reader: r, Service: m[1], Namespace: m[3]}
}

// Addresses returns the ready endpoints ("ip:port") of the Service.
func (e *Endpoints) Addresses(ctx context.Context) ([]string, error) {
	e.mu.Lock()
	if e.addrs != nil && time.Since(e.readAt) < endpointsFor {
		addrs := e.addrs
		e.mu.Unlock()
		return addrs, nil
	}
	e.mu.Unlock()
	list := &discoveryv1.EndpointSliceList{}
	if err := e.Reader.List(ctx, list, client.InNamespace(e.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: e.Service}); err != nil {
		return nil, fmt.Errorf("listing the endpoints of Service %s/%s: %w", e.Namespace, e.Service, err)
	}
	items := make([]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		items[i] = &list.Items[i]
	}
	addrs := endpoints.Ready(items, "https")
	if len(addrs) == 0 {
		return nil, fmt.Errorf("Service %s/%s has no ready endpoint", e.Namespace, e.Service)
	}
	e.mu.Lock()
	e.addrs, e.readAt = addrs, time.Now()
	e.mu.Unlock()
	return addrs, nil
}

// Failed makes the next Addresses read the endpoints again.
func (e *Endpoints) Failed() {
	e.mu.Lock()
	e.addrs = nil
	e.mu.Unlock()
}
