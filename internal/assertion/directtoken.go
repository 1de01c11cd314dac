package assertion

import (
	"errors"
	"fmt"
	"net/http"
	gopath "path"
	"slices"
	"strings"
	"time"
)

// Direct tokens (docs/design/cluster-access.md, "Authorized cluster endpoint") are
// bearer tokens fleet-proxy issues to a user for one cluster's direct
// endpoint: the same keys and the same identity claims as an assertion, a
// different issuer (so neither is ever accepted as the other), a lifetime of
// up to MaxDirectLifetime, and the verbs the user holds on clusters/proxy
// for that cluster. They are used many times (no replay cache); a revoked
// one is refused by its jti.
const (
	// DirectIssuer is the iss claim of every direct token.
	DirectIssuer = "fleet-proxy/direct"
	// MaxDirectLifetime bounds exp - iat of a direct token.
	MaxDirectLifetime = 24 * time.Hour
	// DefaultDirectLifetime is the lifetime of a direct token when the
	// caller asks for none.
	DefaultDirectLifetime = time.Hour
)

// DirectVerbs are the verbs a direct token may carry: the verbs of
// clusters/proxy, mapped from the HTTP method as fleet-proxy maps them.
var DirectVerbs = []string{"get", "create", "update", "patch", "delete"}

// methodVerbs maps the HTTP method to the verb of clusters/proxy, as the
// API server maps it for pods/proxy.
var methodVerbs = map[string]string{
	http.MethodGet: "get", http.MethodHead: "get", http.MethodOptions: "get",
	http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete",
}

// VerbOf is the verb of clusters/proxy a plain request with method needs.
// RequestVerb is what fleet-proxy and the direct endpoint decide with.
func VerbOf(method string) (string, bool) {
	v, ok := methodVerbs[method]
	return v, ok
}

// RequestVerb is the verb of clusters/proxy a request for the cluster's
// Kubernetes API path (the path inside the cluster, decoded) needs: what
// fleet-proxy asks the upstream and the direct endpoint finds in a token.
// A stream into a workload (NeedsCreate) needs create whatever its method,
// as the Kubernetes API server needs create on pods/exec; otherwise the
// method decides (VerbOf). False for a method without a verb.
func RequestVerb(method string, header http.Header, path string) (string, bool) {
	v, ok := VerbOf(method)
	if !ok {
		return "", false
	}
	if NeedsCreate(header, path) {
		return "create", true
	}
	return v, true
}

// streamSubresources are the pod subresources that open a stream into a
// container.
var streamSubresources = []string{"exec", "attach", "portforward"}

// NeedsCreate reports whether a request opens a stream: a protocol upgrade
// (SPDY or WebSocket: exec, attach and port-forward of pods, and anything
// else upgraded, such as a node proxy's exec), whatever its method, or a
// request for pods/<name>/exec, attach or portforward even without the
// upgrade headers. WebSocket clients send these as GET, so the method
// alone would make them reads.
func NeedsCreate(header http.Header, path string) bool {
	if header.Get("Upgrade") != "" {
		return true
	}
	for _, v := range header.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), "upgrade") {
				return true
			}
		}
	}
	segs := strings.Split(strings.Trim(gopath.Clean("/"+path), "/"), "/")
	n := len(segs)
	return n >= 3 && segs[n-3] == "pods" && slices.Contains(streamSubresources, segs[n-1])
}

// DirectToken is what a direct token says.
type DirectToken struct {
	Identity
	// Audience is "<workspace>/<cluster>".
	Audience string
	// Verbs the holder may use, a subset of DirectVerbs, sorted.
	Verbs []string
	// ID is the jti, the handle of a revocation.
	ID string
	// IssuedAt and Expiry bound the token.
	IssuedAt, Expiry time.Time
}

// Allows reports whether the token carries verb.
func (t DirectToken) Allows(verb string) bool { return slices.Contains(t.Verbs, verb) }

type directClaims struct {
	claims
	Verbs []string `json:"verbs"`
}

// SignDirect returns a direct token for id on audience with verbs, issued at
// now, living lifetime (zero: DefaultDirectLifetime; more than
// MaxDirectLifetime: an error).
func (s *Signer) SignDirect(id Identity, audience string, verbs []string, now time.Time, lifetime time.Duration) (string, DirectToken, error) {
	if lifetime == 0 {
		lifetime = DefaultDirectLifetime
	}
	if lifetime < 0 || lifetime > MaxDirectLifetime {
		return "", DirectToken{}, fmt.Errorf("assertion: a direct token lives at most %s", MaxDirectLifetime)
	}
	verbs, err := directVerbs(verbs)
	if err != nil {
		return "", DirectToken{}, err
	}
	id = filter(id)
	now = now.Truncate(time.Second) // NumericDate has seconds
	t := DirectToken{Identity: id, Audience: audience, Verbs: verbs, IssuedAt: now, Expiry: now.Add(lifetime)}
	raw, jti, err := s.sign(directToken, id, audience, t.IssuedAt, t.Expiry,
		directClaims{claims: claims{UID: id.UID, Groups: id.Groups, Extra: id.Extra}, Verbs: verbs})
	if err != nil {
		return "", DirectToken{}, err
	}
	t.ID = jti
	return raw, t, nil
}

// directVerbs checks verbs against DirectVerbs and returns them sorted and
// deduplicated; at least one is needed.
func directVerbs(verbs []string) ([]string, error) {
	out := slices.Clone(verbs)
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		return nil, errors.New("assertion: a direct token carries at least one verb")
	}
	for _, v := range out {
		if !slices.Contains(DirectVerbs, v) {
			return nil, fmt.Errorf("assertion: verb %q is not one of %v", v, DirectVerbs)
		}
	}
	return out, nil
}

// VerifyDirect checks a direct token for audience at now and returns what it
// says. It refuses (an error wrapping ErrInvalid; ErrUnknownKey for an
// unknown kid) a token that checkClaims refuses for a direct token (issuer
// fleet-proxy/direct, so an assertion is refused; lifetime at most
// MaxDirectLifetime) or without a valid verb. Revocation is the caller's to
// check, by ID.
func (v *Verifier) VerifyDirect(token, audience string, now time.Time) (DirectToken, error) {
	var priv directClaims
	std, err := v.checkClaims(token, directToken, audience, now, &priv)
	if err != nil {
		return DirectToken{}, err
	}
	verbs, err := directVerbs(priv.Verbs)
	if err != nil {
		return DirectToken{}, refuse("bad verbs")
	}
	return DirectToken{
		Identity: filter(Identity{User: std.Subject, UID: priv.UID, Groups: priv.Groups, Extra: priv.Extra}),
		Audience: audience, Verbs: verbs, ID: std.ID, IssuedAt: std.IssuedAt.Time(), Expiry: std.Expiry.Time(),
	}, nil
}
