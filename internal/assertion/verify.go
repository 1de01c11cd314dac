package assertion

import (
	"errors"
	"fmt"
	"sync"
	"time"
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
// It refuses (an error wrapping ErrInvalid) a token that checkClaims refuses
// for an assertion (issuer fleet-proxy, lifetime at most MaxLifetime), or
// whose jti it accepted before.
func (v *Verifier) Verify(token, audience string, now time.Time) (Identity, error) {
	var priv claims
	std, err := v.checkClaims(token, assertionToken, audience, now, &priv)
	if err != nil {
		return Identity{}, err
	}
	if err := v.remember(std.ID, std.Expiry.Time().Add(Skew), now); err != nil {
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
