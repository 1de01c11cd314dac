// Package assertion is the signed identity assertion fleet-proxy adds to each
// user request it sends through a cluster's tunnel, and the agent verifies
// before it acts as that user (docs/design/cluster-access.md, "The identity
// assertion").
//
// An assertion is a compact JWS signed with Ed25519 (alg EdDSA) whose kid is
// the first 16 hex characters of the SHA-256 of the public key. Its claims
// name the upstream user (sub, uid, groups without system:authenticated,
// allow-listed extras), the Cluster it is for (aud "<workspace>/<cluster>"),
// its lifetime (iat, exp; at most 60 s) and a random 128-bit jti that a
// Verifier accepts once. The JWS is made and checked by go-jose; this package
// only chooses what it accepts.
package assertion

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

const (
	// HeaderName is the request header that carries the assertion.
	HeaderName = "X-Fleet-Assertion"
	// Issuer is the iss claim of every assertion.
	Issuer = "fleet-proxy"
	// MaxLifetime bounds exp - iat.
	MaxLifetime = 60 * time.Second
	// Skew is the clock difference tolerated between the signer and the
	// verifier, for iat in the future and exp in the past.
	Skew = 5 * time.Second
	// Algorithm is the only signature algorithm made and accepted.
	Algorithm = jose.EdDSA

	// authenticatedGroup is added by every API server to every
	// authenticated user; it is never carried.
	authenticatedGroup = "system:authenticated"
)

// AllowedExtras are the only user extra keys an assertion carries and a
// Verifier returns.
var AllowedExtras = []string{"authentication.kubernetes.io/credential-id"}

// Identity is the upstream user an assertion names.
type Identity struct {
	User   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// claims are the private claims beside jwt.Claims.
type claims struct {
	UID    string              `json:"uid,omitempty"`
	Groups []string            `json:"groups,omitempty"`
	Extra  map[string][]string `json:"extra,omitempty"`
}

// KeyID is the kid of a public key: the first 16 hex characters of the
// SHA-256 of the raw key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])[:16]
}

// filter returns the identity as it is carried: groups without
// system:authenticated (sorted, deduplicated), only allow-listed extras.
func filter(id Identity) Identity {
	out := Identity{User: id.User, UID: id.UID}
	for _, g := range id.Groups {
		if g != authenticatedGroup && g != "" {
			out.Groups = append(out.Groups, g)
		}
	}
	slices.Sort(out.Groups)
	out.Groups = slices.Compact(out.Groups)
	for _, k := range AllowedExtras {
		if v, ok := id.Extra[k]; ok && len(v) > 0 {
			if out.Extra == nil {
				out.Extra = map[string][]string{}
			}
			out.Extra[k] = slices.Clone(v)
		}
	}
	return out
}

// Signer makes assertions with one Ed25519 private key.
type Signer struct {
	kid      string
	pub      ed25519.PublicKey
	signer   jose.Signer
	lifetime time.Duration
}

// NewSigner returns a Signer for key; assertions live lifetime (zero or
// more than MaxLifetime: MaxLifetime).
func NewSigner(key ed25519.PrivateKey, lifetime time.Duration) (*Signer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("assertion: not an Ed25519 private key")
	}
	if lifetime <= 0 || lifetime > MaxLifetime {
		lifetime = MaxLifetime
	}
	pub := key.Public().(ed25519.PublicKey)
	kid := KeyID(pub)
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: Algorithm, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, fmt.Errorf("assertion: %w", err)
	}
	return &Signer{kid: kid, pub: pub, signer: sig, lifetime: lifetime}, nil
}

// KeyID is the kid of the Signer's key.
func (s *Signer) KeyID() string { return s.kid }

// PublicKey is the Signer's public key.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.pub }

// Sign returns an assertion that id made the request, for audience
// ("<workspace>/<cluster>"), issued at now.
func (s *Signer) Sign(id Identity, audience string, now time.Time) (string, error) {
	id = filter(id)
	raw, _, err := s.sign(assertionToken, id, audience, now, now.Add(s.lifetime), claims{UID: id.UID, Groups: id.Groups, Extra: id.Extra})
	return raw, err
}

// KeySet is a set of public keys by kid.
type KeySet struct {
	keys map[string]ed25519.PublicKey
}

// NewKeySet returns the set of pubs.
func NewKeySet(pubs ...ed25519.PublicKey) *KeySet {
	ks := &KeySet{keys: map[string]ed25519.PublicKey{}}
	for _, p := range pubs {
		ks.keys[KeyID(p)] = slices.Clone(p)
	}
	return ks
}

// Key returns the key of kid.
func (ks *KeySet) Key(kid string) (ed25519.PublicKey, bool) {
	if ks == nil {
		return nil, false
	}
	k, ok := ks.keys[kid]
	return k, ok
}

// KeyIDs are the kids of the set, sorted.
func (ks *KeySet) KeyIDs() []string {
	if ks == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(ks.keys))
}

// MarshalJSON encodes the set as a JWK Set (RFC 7517) of public OKP keys
// with kid, alg EdDSA and use sig.
func (ks *KeySet) MarshalJSON() ([]byte, error) {
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	for _, kid := range ks.KeyIDs() {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: ks.keys[kid], KeyID: kid, Algorithm: string(Algorithm), Use: "sig"})
	}
	return json.Marshal(set)
}

// UnmarshalJSON reads a JWK Set. Only public Ed25519 keys whose kid is the
// one KeyID computes are accepted; anything else is an error.
func (ks *KeySet) UnmarshalJSON(data []byte) error {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data, &set); err != nil {
		return fmt.Errorf("assertion: key set: %w", err)
	}
	keys := map[string]ed25519.PublicKey{}
	for i, k := range set.Keys {
		pub, ok := k.Key.(ed25519.PublicKey)
		if !ok {
			return fmt.Errorf("assertion: key set: key %d is not a public Ed25519 key", i)
		}
		if k.Algorithm != "" && k.Algorithm != string(Algorithm) {
			return fmt.Errorf("assertion: key set: key %d has alg %q", i, k.Algorithm)
		}
		if kid := KeyID(pub); k.KeyID != kid {
			return fmt.Errorf("assertion: key set: key %d has kid %q, not %q", i, k.KeyID, kid)
		}
		keys[k.KeyID] = pub
	}
	ks.keys = keys
	return nil
}

// ParseKeySet decodes a JWK Set (see UnmarshalJSON).
func ParseKeySet(data []byte) (*KeySet, error) {
	ks := &KeySet{}
	if err := ks.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return ks, nil
}

// SigningKeysPath is where the upstream API server serves the public keys
// (a JWK Set) to agents, through fleet-proxy.
const SigningKeysPath = "/apis/proxy.fleet.cattle.io/v1alpha1/signingkeys"
