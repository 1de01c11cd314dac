// Package v1alpha1 holds the wire types of fleet-proxy's aggregated API,
// proxy.fleet.cattle.io/v1alpha1 (docs/design/cluster-access.md): what users,
// agents and `fleet kubeconfig` send to and get from fleet-proxy through the
// upstream API server, besides the proxied Kubernetes requests themselves.
// Nothing of it is stored: there are no CRDs and no scheme; the objects are
// JSON with kind and apiVersion, as the API server's are.
//
// +groupName=proxy.fleet.cattle.io
package v1alpha1

import (
	"net/url"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the aggregated API's group and version
// (APIService v1alpha1.proxy.fleet.cattle.io).
var GroupVersion = schema.GroupVersion{Group: "proxy.fleet.cattle.io", Version: "v1alpha1"}

// APIVersion is GroupVersion as the objects' apiVersion says it.
const APIVersion = "proxy.fleet.cattle.io/v1alpha1"

// clusterPath is the path of Cluster ws/name's subresource sub.
func clusterPath(ws, name, sub string) string {
	return "/apis/" + APIVersion + "/namespaces/" + url.PathEscape(ws) + "/clusters/" + url.PathEscape(name) + "/" + sub
}

// TokenPath is where a user asks fleet-proxy, through the upstream API
// server, for a direct token for Cluster ws/name (POST, a
// DirectTokenRequest).
func TokenPath(ws, name string) string { return clusterPath(ws, name, "token") }

// RevocationsPath is where the agent of Cluster ws/name reads the revoked
// direct tokens of its cluster (GET, DirectTokenRevocations; ETag and
// If-None-Match).
func RevocationsPath(ws, name string) string { return clusterPath(ws, name, "revocations") }
