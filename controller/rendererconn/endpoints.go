package rendererconn

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	addrs := readyAddresses(list.Items)
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

// readyAddresses are the ready endpoints of slices at their "https" port
// (or their only one), sorted.
func readyAddresses(items []discoveryv1.EndpointSlice) []string {
	var addrs []string
	for _, s := range items {
		port := 0
		for _, p := range s.Ports {
			if p.Port != nil && (len(s.Ports) == 1 || (p.Name != nil && *p.Name == "https")) {
				port = int(*p.Port)
			}
		}
		if port == 0 || (s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6) {
			continue
		}
		for _, ep := range s.Endpoints {
			// nil means unknown, which Services take as ready.
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				addrs = append(addrs, net.JoinHostPort(a, strconv.Itoa(port)))
			}
		}
	}
	slices.Sort(addrs)
	return slices.Compact(addrs)
}
