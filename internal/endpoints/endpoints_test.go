package endpoints

import (
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func TestReady_OnlyReadyAddressesAtTheNamedPort(t *testing.T) {
	port := func(name string, n int32) discoveryv1.EndpointPort {
		return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(n)}
	}
	ep := func(ready *bool, addrs ...string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	for _, tc := range []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   []string
	}{{
		name: "ready, unknown readiness counts as ready, not ready left out",
		slices: []*discoveryv1.EndpointSlice{{
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("https", 8443)},
			Endpoints: []discoveryv1.Endpoint{ep(ptr.To(true), "10.0.0.2"), ep(nil, "10.0.0.1"), ep(ptr.To(false), "10.0.0.3")},
		}},
		want: []string{"10.0.0.1:8443", "10.0.0.2:8443"},
	}, {
		name: "the port named https among several; IPv6 bracketed; repeats across slices once",
		slices: []*discoveryv1.EndpointSlice{{
			AddressType: discoveryv1.AddressTypeIPv6, Ports: []discoveryv1.EndpointPort{port("metrics", 8080), port("https", 8443)},
			Endpoints: []discoveryv1.Endpoint{ep(nil, "fd00::1")},
		}, {
			AddressType: discoveryv1.AddressTypeIPv6, Ports: []discoveryv1.EndpointPort{port("https", 8443)},
			Endpoints: []discoveryv1.Endpoint{ep(nil, "fd00::1")},
		}},
		want: []string{"[fd00::1]:8443"},
	}, {
		name: "the only port whatever its name",
		slices: []*discoveryv1.EndpointSlice{{
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("", 9443)},
			Endpoints: []discoveryv1.Endpoint{ep(nil, "10.0.0.1")},
		}},
		want: []string{"10.0.0.1:9443"},
	}, {
		name: "no port of that name among several, or an FQDN slice: nothing",
		slices: []*discoveryv1.EndpointSlice{{
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("a", 1), port("b", 2)},
			Endpoints: []discoveryv1.Endpoint{ep(nil, "10.0.0.1")},
		}, {
			AddressType: discoveryv1.AddressTypeFQDN, Ports: []discoveryv1.EndpointPort{port("https", 443)},
			Endpoints: []discoveryv1.Endpoint{ep(nil, "renderer.example")},
		}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Ready(tc.slices, "https"); !slices.Equal(got, tc.want) {
				t.Errorf("Ready = %q, want %q", got, tc.want)
			}
		})
	}
}
