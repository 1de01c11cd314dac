package assertion

import (
	"errors"
	"fmt"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

var (
	// ErrInvalid is wrapped by every refusal of Verify. Refusals never
	// contain the token.
	ErrInvalid = errors.New("invalid identity assertion")
	// ErrUnknownKey is a refusal because no key of the set has the kid: the
	// caller may refresh its keys and verify again.
	ErrUnknownKey = fmt.Errorf("%w: signed by an unknown key", ErrInvalid)
	// ErrReplayed is a refusal because the jti was accepted before.
	ErrReplayed = fmt.Errorf("%w: replayed", ErrInvalid)
)

// DefaultReplayCacheSize bounds the jtis a Verifier remembers.
const DefaultReplayCacheSize = 100000

// Verifier checks assertions for one set of keys and accepts each jti once
// while it is valid. It is safe for concurrent use.
type Verifier struct {
	mu       sync.Mutex
	keys     *KeySet
	seen     map[string]time.Time // jti → until when it must be remembered
	maxSeen  int
	lastPrun time.Time
}

// NewVerifier returns a Verifier for keys that remembers up to
// DefaultReplayCacheSize jtis.
func NewVerifier(keys *KeySet) *Verifier {
	return &Verifier{keys: keys, seen: map[string]time.Time{}, maxSeen: DefaultReplayCacheSize}
}

// SetKeys replaces the keys (after a refresh).
func (v *Verifier) SetKeys(keys *KeySet) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.keys = keys
}

// Keys returns the current keys.
func (v *Verifier) Keys() *KeySet {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.keys
}

func refuse(reason string) error { return fmt.Errorf("%w: %s", ErrInvalid, reason) }

// Verify checks token for audience at now and returns the identity it names.
// It refuses (an error wrapping ErrInvalid) a token that is not a compact
// JWS, not signed with alg EdDSA by a key of the set (by kid), not issued by
// fleet-proxy, not for exactly audience, expired, issued in the future,
// living longer than MaxLifetime, without a subject or jti, or whose jti it
// accepted before.
func (v *Verifier) Verify(token, audience string, now time.Time) (Identity, error) {
	if token == "" {
		return Identity{}, refuse("missing")
	}
	if len(token) > 64<<10 {
		return Identity{}, refuse("too large")
	}
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{Algorithm})
	if err != nil {
		return Identity{}, refuse("not a compact JWS with alg EdDSA")
	}
	if len(tok.Headers) != 1 {
		return Identity{}, refuse("not exactly one signature")
	}
	h := tok.Headers[0]
	if h.Algorithm != string(Algorithm) {
		return Identity{}, refuse("alg is not EdDSA")
	}
	key, ok := v.Keys().Key(h.KeyID)
	if !ok {
		return Identity{}, ErrUnknownKey
	}
	var std jwt.Claims
	var priv claims
	if err := tok.Claims(key, &std, &priv); err != nil {
		return Identity{}, refuse("bad signature or claims")
	}
	switch {
	case std.Issuer != Issuer:
		return Identity{}, refuse("wrong issuer")
	case len(std.Audience) != 1 || std.Audience[0] != audience:
		return Identity{}, refuse("wrong audience")
	case std.Subject == "":
		return Identity{}, refuse("no subject")
	case std.ID == "" || len(std.ID) > 128:
		return Identity{}, refuse("no jti")
	case std.IssuedAt == nil || std.Expiry == nil:
		return Identity{}, refuse("no iat or exp")
	}
	iat, exp := std.IssuedAt.Time(), std.Expiry.Time()
	switch {
	case !exp.After(iat):
		return Identity{}, refuse("exp not after iat")
	case exp.Sub(iat) > MaxLifetime:
		return Identity{}, refuse("lifetime too long")
	case iat.After(now.Add(Skew)):
		return Identity{}, refuse("issued in the future")
	case !now.Before(exp.Add(Skew)):
		return Identity{}, refuse("expired")
	case std.NotBefore != nil && std.NotBefore.Time().After(now.Add(Skew)):
		return Identity{}, refuse("not yet valid")
	}
	if err := v.remember(std.ID, exp.Add(Skew), now); err != nil {
		return Identity{}, err
	}
	return filter(Identity{User: std.Subject, UID: priv.UID, Groups: priv.Groups, Extra: priv.Extra}), nil
}

// remember records jti until until, refusing one already recorded. When the
// cache is full of live entries it refuses (fail closed) rather than forget
// one that could then be replayed.
func (v *Verifier) remember(jti string, until, now time.Time) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if t, ok := v.seen[jti]; ok && now.Before(t) {
		return ErrReplayed
	}
	if len(v.seen) >= v.maxSeen || now.Sub(v.lastPrun) > MaxLifetime {
		for k, t := range v.seen {
			if !now.Before(t) {
				delete(v.seen, k)
			}
		}
		v.lastPrun = now
	}
	if len(v.seen) >= v.maxSeen {
		return refuse("too many assertions in flight")
	}
	v.seen[jti] = until
	return nil
}
