package token

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
)

// ValuesKey is the key of the values Secret that holds the values file for
// `helm install fleet-agent charts/fleet-agent -f values.yaml`.
const ValuesKey = registration.TokenValuesKey

// Annotations on the values Secret that describe the bearer token it holds,
// so the controller mints it once and renews it only when it must.
const (
	// TokenExpiresAnnotation is when the bearer token expires (RFC3339).
	TokenExpiresAnnotation = "fleet.cattle.io/token-expires"
	// TokenIssuedAnnotation is when the bearer token was issued (RFC3339).
	TokenIssuedAnnotation = "fleet.cattle.io/token-issued"
	// TokenServiceAccountUIDAnnotation is the UID of the import
	// ServiceAccount the bearer token belongs to: a token of a deleted and
	// recreated ServiceAccount no longer authenticates.
	TokenServiceAccountUIDAnnotation = "fleet.cattle.io/token-serviceaccount-uid"
)

const (
	// noTTLTokenLifetime is the bearer token lifetime for registration
	// tokens that never expire; it is renewed before it runs out.
	noTTLTokenLifetime = 365 * 24 * time.Hour
	// minTokenLifetime is the shortest lifetime the TokenRequest API grants.
	minTokenLifetime = 10 * time.Minute
	// tokenExpirySlack is added to the requested lifetime of bearer tokens of
	// registration tokens with a TTL, so clock skew between the controller
	// and the API server does not leave the last seconds uncovered. The
	// token is revoked anyway when its registration token is deleted.
	tokenExpirySlack = time.Minute
	// renewMinMargin and renewFraction: a bearer token is renewed when less
	// than an hour, or less than a fifth of its lifetime, remains.
	renewMinMargin = time.Hour
	renewFraction  = 5
)

// valuesFile is the values file of a token's values Secret: the token's
// agent values (agentvalues.ForToken) with the bearer token.
func valuesFile(cfg *config.Config, token *fleet.ClusterRegistrationToken, bearer string) ([]byte, error) {
	v, err := agentvalues.ForToken(token, cfg, bearer)
	if err != nil {
		return nil, err
	}
	b, err := v.YAML()
	if err != nil {
		return nil, fmt.Errorf("marshalling agent values: %w", err)
	}
	return b, nil
}

// Bearer returns the import bearer token in a token's values Secret, or ""
// when it holds none (or no readable values file).
func Bearer(secret *corev1.Secret) string {
	v, err := agentvalues.Parse(secret.Data[ValuesKey])
	if err != nil || v.Token == agentvalues.TokenPlaceholder {
		return ""
	}
	return v.Token
}

// tokenTTL returns the registration token's TTL; zero means no expiry.
func tokenTTL(token *fleet.ClusterRegistrationToken) time.Duration {
	if token.Spec.TTL == nil || token.Spec.TTL.Duration <= 0 {
		return 0
	}
	return token.Spec.TTL.Duration
}

// expiresAt returns when a registration token created at created with ttl
// expires, rounded up to a whole second: that is the precision of
// status.expires, and the token is deleted exactly at the time it shows.
func expiresAt(created time.Time, ttl time.Duration) time.Time {
	e := created.Add(ttl)
	if t := e.Truncate(time.Second); !t.Equal(e) {
		e = t.Add(time.Second)
	}
	return e
}

// requestedLifetime returns the lifetime to ask the TokenRequest API for: the
// rest of the registration token's life (at least the API minimum), or a
// year for tokens that never expire.
func requestedLifetime(now time.Time, expires *time.Time) time.Duration {
	if expires == nil {
		return noTTLTokenLifetime
	}
	d := expires.Sub(now) + tokenExpirySlack
	if d < minTokenLifetime {
		d = minTokenLifetime
	}
	return d.Truncate(time.Second) + time.Second
}

// renewAt returns when a bearer token issued at issued and expiring at exp
// must be replaced, or the zero time when it never needs to be because it
// outlives its registration token (expires). The margin is the larger of an
// hour and a fifth of the token's lifetime, but at most half of it, so a
// freshly minted token is never due at once (no renewal loop even when the
// API server grants short lifetimes).
func renewAt(issued, exp time.Time, expires *time.Time) time.Time {
	if expires != nil && !exp.Before(*expires) {
		return time.Time{}
	}
	lifetime := exp.Sub(issued)
	margin := max(lifetime/renewFraction, renewMinMargin)
	margin = min(margin, lifetime/2)
	return exp.Add(-max(margin, 0))
}
