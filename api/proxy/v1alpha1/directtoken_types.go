package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The authorized cluster endpoint (docs/design/cluster-access.md,
// "Authorized cluster endpoint"): users get a direct token for one cluster
// from fleet-proxy (their upstream identity, upstream RBAC on
// clusters/proxy); the agent verifies it offline against the signing keys it
// already holds and a revocation list it keeps in step with fleet-proxy
// while the upstream is reachable.

// Kinds of the objects below.
const (
	DirectTokenRequestKind     = "DirectTokenRequest"
	DirectTokenKind            = "DirectToken"
	DirectTokenRevocationsKind = "DirectTokenRevocations"
)

// DirectTokenRequest asks for a direct token. Its body may be empty.
type DirectTokenRequest struct {
	metav1.TypeMeta `json:",inline"`
	Spec            DirectTokenRequestSpec `json:"spec"`
}

// DirectTokenRequestSpec is what a token request asks.
type DirectTokenRequestSpec struct {
	// ExpirationSeconds is the token's lifetime (0: one hour). A token
	// never outlives the credential the request is made with: when
	// Credential shows how long that lives, fleet-proxy shortens the
	// token to it; without it, to fleet-proxy's
	// --direct-token-unverified-max-lifetime.
	ExpirationSeconds int64 `json:"expirationSeconds,omitempty"`
	// Credential is the caller's own credential, the one the request
	// is made with, so that fleet-proxy learns when it expires.
	Credential *Credential `json:"credential,omitempty"`
}

// Credential shows fleet-proxy the credential a token request is made
// with. fleet-proxy keeps nothing of it but its expiry.
type Credential struct {
	// Token is the bearer token of the request. fleet-proxy reviews it
	// (TokenReview): it must authenticate as the request's user (and, when
	// the API server names the request's credential, be that credential);
	// its JWT exp is then the credential's expiry.
	Token string `json:"token,omitempty"`
	// ClientCertificate is the PEM client certificate of the request (no
	// key: it is public). It must be the certificate the API server
	// authenticated the request with (its SHA-256 is the request's
	// credential id); its notAfter is then the credential's expiry.
	ClientCertificate string `json:"clientCertificate,omitempty"`
}

// Why a token lives less than asked (DirectTokenStatus.LimitedBy).
const (
	// LimitedByCredential: the caller's credential expires sooner.
	LimitedByCredential = "credential"
	// LimitedByUnverifiedCredential: how long the caller's credential
	// lives is unknown (none shown, or one without an expiry).
	LimitedByUnverifiedCredential = "unverifiedCredential"
)

// DirectToken is fleet-proxy's answer to a DirectTokenRequest: the token,
// when it expires, and the verbs of clusters/proxy it carries (the holder
// may use exactly those).
type DirectToken struct {
	metav1.TypeMeta `json:",inline"`
	Status          DirectTokenStatus `json:"status"`
}

// DirectTokenStatus is the token issued.
type DirectTokenStatus struct {
	Token               string    `json:"token"`
	ExpirationTimestamp time.Time `json:"expirationTimestamp"`
	Verbs               []string  `json:"verbs"`
	// Endpoint is where the token is used: the Cluster's
	// spec.agentDirectEndpoint.url and the CA its agent reported.
	Endpoint DirectEndpoint `json:"endpoint"`
	// LimitedBy, when set, says why the token lives less than asked
	// (LimitedByCredential, LimitedByUnverifiedCredential).
	LimitedBy string `json:"limitedBy,omitempty"`
}

// DirectEndpoint is a cluster's direct endpoint as a client needs it.
type DirectEndpoint struct {
	URL      string `json:"url"`
	CABundle string `json:"caBundle"`
	// CertificateNames are the names the endpoint's serving certificate is
	// valid for, as its agent reported them (none: not reported), so that
	// a client can warn of a url whose host it does not cover.
	CertificateNames []string `json:"certificateNames,omitempty"`
}

// NoDirectEndpointReason is the reason of fleet-proxy's refusal to issue a
// token for a Cluster without a direct endpoint (not an error for a client
// that only tries).
const NoDirectEndpointReason metav1.StatusReason = "NoDirectEndpoint"

// RevokedToken is one revoked token: its jti and when it expires anyway
// (after that it need not be remembered).
type RevokedToken struct {
	ID     string    `json:"id"`
	Expiry time.Time `json:"expiry"`
}

// DirectTokenRevocations is the revocation list of one cluster.
type DirectTokenRevocations struct {
	metav1.TypeMeta `json:",inline"`
	Revoked         []RevokedToken `json:"revoked"`
}
