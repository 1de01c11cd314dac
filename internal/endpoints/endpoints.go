// Package endpoints reads the ready addresses of a Service from its
// EndpointSlices: fleet-proxy finds its peers so, and the controller the
// renderer's pods (neither needs cluster DNS or a service proxy).
package endpoints

import (
	"net"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Ready returns the ready endpoints of the slices as host:port, at each
// slice's port named portName (or its only port), sorted and without
// repeats. An endpoint whose readiness is unknown counts as ready, as it
// does for Services; slices of other address types (FQDN) are skipped.
func Ready(items []*discoveryv1.EndpointSlice, portName string) []string {
	var addrs []string
	for _, s := range items {
		port := 0
		for _, p := range s.Ports {
			if p.Port != nil && (len(s.Ports) == 1 || (p.Name != nil && *p.Name == portName)) {
				port = int(*p.Port)
			}
		}
		if port == 0 || (s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6) {
			continue
		}
		for _, ep := range s.Endpoints {
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
