package token

import (
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/renderer"
)

// ValuesKey is the key of the values Secret that holds the values file for
// `helm install fleet-agent charts/fleet-agent -f values.yaml`.
const ValuesKey = "values"

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

// Values is the values file an agent is installed with. Its keys are valid
// against charts/fleet-agent/values.schema.json.
type Values struct {
	APIServerURL string `json:"apiServerURL"`
	// InsecureAPIServerURL is set for a plain http URL, which the
	// controller configuration allowed (allowInsecureAPIServerURL): the
	// agent chart refuses one without it.
	InsecureAPIServerURL        bool   `json:"insecureAPIServerURL,omitempty"`
	APIServerCA                 string `json:"apiServerCA"`
	ClientID                    string `json:"clientID,omitempty"`
	ClusterNamespace            string `json:"clusterNamespace"`
	SystemRegistrationNamespace string `json:"systemRegistrationNamespace"`
	Token                       string `json:"token"`
	TokenName                   string `json:"tokenName"`
	// AgentTLSMode and Image carry the controller's agent settings, so an
	// agent installed with this file runs exactly what the agent's own
	// Bundle (manageagent) applies later: adoption then restarts nothing.
	AgentTLSMode    string      `json:"agentTLSMode,omitempty"`
	CheckinInterval string      `json:"checkinInterval,omitempty"`
	Image           *ImageValue `json:"image,omitempty"`
}

// ImageValue is the agent chart's image value.
type ImageValue struct {
	Repository      string `json:"repository"`
	Tag             string `json:"tag"`
	ImagePullPolicy string `json:"imagePullPolicy"`
}

// NewValues returns the values for a registration token, given the
// controller configuration and the import ServiceAccount's bearer token.
func NewValues(cfg *config.Config, token *fleet.ClusterRegistrationToken, bearer string) Values {
	v := Values{
		APIServerURL:                cfg.APIServerURL,
		InsecureAPIServerURL:        strings.HasPrefix(strings.ToLower(cfg.APIServerURL), "http://"),
		APIServerCA:                 string(cfg.APIServerCA),
		ClientID:                    token.Spec.ClientID,
		ClusterNamespace:            token.Namespace,
		SystemRegistrationNamespace: config.DefaultSystemRegistrationNS,
		Token:                       bearer,
		TokenName:                   token.Name,
		AgentTLSMode:                cfg.GetAgentTLSMode(),
		CheckinInterval:             renderer.ShortDuration(cfg.GetAgentCheckinInterval()),
	}
	// The configuration was validated when loaded; an image that does not
	// split is left to the chart's default rather than written half.
	if repo, tag, err := renderer.SplitImage(cfg.GetAgentImage()); err == nil {
		v.Image = &ImageValue{Repository: repo, Tag: tag, ImagePullPolicy: string(cfg.GetAgentImagePullPolicy())}
	}
	return v
}

// Marshal returns the values file.
func (v Values) Marshal() ([]byte, error) {
	b, err := yaml.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshalling agent values: %w", err)
	}
	return b, nil
}

// ParseValues reads a values file written by Marshal.
func ParseValues(data []byte) (Values, error) {
	var v Values
	if err := yaml.Unmarshal(data, &v); err != nil {
		return Values{}, fmt.Errorf("parsing agent values: %w", err)
	}
	return v, nil
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
