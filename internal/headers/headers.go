// Package headers cleans the headers of a request fleet forwards to a
// cluster (docs/design/cluster-access.md): fleet-proxy before it sends a
// user's request through the cluster's tunnel, the agent before it sends
// one (from the tunnel or its direct endpoint) to its API server. Nothing
// that authenticates or names an identity, or belongs to one hop of the
// connection only, crosses: each hop sets its own.
package headers

import (
	"net/http"
	"strings"

	"github.com/gitops-fleet/fleet/internal/assertion"
)

// dropped are the headers Clean removes by name (lower case): the
// hop-by-hop headers (RFC 9110 7.6.1 and the ones httputil.ReverseProxy
// removes), credentials, a proxy's word on the client and the assertion.
var dropped = map[string]bool{
	"connection": true, "proxy-connection": true, "keep-alive": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
	"authorization": true, "forwarded": true, strings.ToLower(assertion.HeaderName): true,
}

// identityPrefixes start the names of headers that name an identity or
// speak for an earlier hop: impersonation, the aggregator's requestheader
// identity and a proxy's word on the client.
var identityPrefixes = []string{"impersonate-", "x-remote-", "x-forwarded-"}

// Clean removes, in place, what must not be forwarded: every header the
// Connection header names, the hop-by-hop headers, credentials
// (Authorization, Proxy-Authorization), Impersonate-*, X-Remote-*,
// X-Forwarded-*, Forwarded and any identity assertion (the forwarder adds
// its own). An upgrade (upgrade true, and an Upgrade header) keeps exactly
// "Connection: Upgrade" and its Upgrade header, nothing else of the kind.
func Clean(h http.Header, upgrade bool) {
	upgradeTo := h.Values("Upgrade")
	for _, v := range h.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for k := range h {
		if l := strings.ToLower(k); dropped[l] || hasIdentityPrefix(l) {
			delete(h, k)
		}
	}
	if upgrade && len(upgradeTo) > 0 {
		h.Set("Connection", "Upgrade")
		h["Upgrade"] = upgradeTo
	}
}

// DropIdentity removes, in place, Authorization, Impersonate-*, X-Remote-*
// and X-Forwarded-*: what the last hop removes again (a reverse proxy adds
// X-Forwarded-For) just before it sets its own credential and identity.
func DropIdentity(h http.Header) {
	for k := range h {
		if l := strings.ToLower(k); l == "authorization" || hasIdentityPrefix(l) {
			delete(h, k)
		}
	}
}

// Impersonation names an Impersonate-* header of h, if there is one.
func Impersonation(h http.Header) (string, bool) {
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "impersonate-") {
			return k, true
		}
	}
	return "", false
}

// hasIdentityPrefix reports whether the lower-case name l starts with one
// of identityPrefixes.
func hasIdentityPrefix(l string) bool {
	for _, p := range identityPrefixes {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}
