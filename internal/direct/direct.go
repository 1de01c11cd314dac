// Package direct is the contract of the authorized cluster endpoint
// (docs/design/cluster-access.md, "Authorized cluster endpoint"): the wire types
// and paths fleet-proxy, the agent and `fleet kubeconfig` share. Users get a
// direct token for one cluster from fleet-proxy (their upstream identity,
// upstream RBAC on clusters/proxy); the agent verifies it offline against
// the signing keys it already holds and a revocation list it keeps in step
// with fleet-proxy while the upstream is reachable.
package direct

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// APIVersion of the objects below (the aggregated API's group version).
const APIVersion = "proxy.fleet.cattle.io/v1alpha1"

// TokenPath is where a user asks fleet-proxy, through the upstream API
// server, for a direct token for Cluster ws/name (POST, a TokenRequest).
func TokenPath(ws, name string) string {
	return "/apis/" + APIVersion + "/namespaces/" + url.PathEscape(ws) + "/clusters/" + url.PathEscape(name) + "/token"
}

// RevocationsPath is where the agent of Cluster ws/name reads the revoked
// direct tokens of its cluster (GET, Revocations; ETag and If-None-Match).
func RevocationsPath(ws, name string) string {
	return "/apis/" + APIVersion + "/namespaces/" + url.PathEscape(ws) + "/clusters/" + url.PathEscape(name) + "/revocations"
}

// TokenRequest asks for a direct token. Its body may be empty.
type TokenRequest struct {
	Kind       string `json:"kind,omitempty"`
	APIVersion string `json:"apiVersion,omitempty"`
	Spec       struct {
		// ExpirationSeconds is the token's lifetime (0: one hour). A token
		// never outlives the credential the request is made with: when
		// Credential shows how long that lives, fleet-proxy shortens the
		// token to it; without it, to fleet-proxy's
		// --direct-token-unverified-max-lifetime.
		ExpirationSeconds int64 `json:"expirationSeconds,omitempty"`
		// Credential is the caller's own credential, the one the request
		// is made with, so that fleet-proxy learns when it expires.
		Credential *Credential `json:"credential,omitempty"`
	} `json:"spec"`
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

// Why a token lives less than asked (TokenResponse.Status.LimitedBy).
const (
	// LimitedByCredential: the caller's credential expires sooner.
	LimitedByCredential = "credential"
	// LimitedByUnverifiedCredential: how long the caller's credential
	// lives is unknown (none shown, or one without an expiry).
	LimitedByUnverifiedCredential = "unverifiedCredential"
)

// TokenResponse is fleet-proxy's answer: the token, when it expires, and
// the verbs of clusters/proxy it carries (the holder may use exactly those).
type TokenResponse struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Status     struct {
		Token               string    `json:"token"`
		ExpirationTimestamp time.Time `json:"expirationTimestamp"`
		Verbs               []string  `json:"verbs"`
		// Endpoint is where the token is used: the Cluster's
		// spec.agentDirectEndpoint.url and the CA its agent reported.
		Endpoint Endpoint `json:"endpoint"`
		// LimitedBy, when set, says why the token lives less than asked
		// (LimitedByCredential, LimitedByUnverifiedCredential).
		LimitedBy string `json:"limitedBy,omitempty"`
	} `json:"status"`
}

// Endpoint is a cluster's direct endpoint as a client needs it.
type Endpoint struct {
	URL      string `json:"url"`
	CABundle string `json:"caBundle"`
	// CertificateNames are the names the endpoint's serving certificate is
	// valid for, as its agent reported them (none: not reported), so that
	// a client can warn of a url whose host it does not cover.
	CertificateNames []string `json:"certificateNames,omitempty"`
}

// NoEndpointReason is the reason of fleet-proxy's refusal to issue a token
// for a Cluster without a direct endpoint (not an error for a client that
// only tries).
const NoEndpointReason metav1.StatusReason = "NoDirectEndpoint"

// Revoked is one revoked token: its jti and when it expires anyway (after
// that it need not be remembered).
type Revoked struct {
	ID     string    `json:"id"`
	Expiry time.Time `json:"expiry"`
}

// Revocations is the revocation list of one cluster.
type Revocations struct {
	Kind       string    `json:"kind"`
	APIVersion string    `json:"apiVersion"`
	Revoked    []Revoked `json:"revoked"`
}

// Kinds of the objects above.
const (
	TokenRequestKind  = "DirectTokenRequest"
	TokenResponseKind = "DirectToken"
	RevocationsKind   = "DirectTokenRevocations"
)

// Agent side.
const (
	// ServiceName is the downstream Service of the agent's direct endpoint,
	// in the agent's namespace.
	ServiceName = "fleet-agent-direct"
	// TLSSecretName holds the endpoint's serving certificate and its CA
	// (made by the agent when missing, or brought by the operator).
	TLSSecretName = "fleet-agent-direct-tls"
	// StateConfigMapName keeps the signing keys and the revocation list the
	// agent last read, so a restarted agent verifies tokens while the
	// upstream is unreachable.
	StateConfigMapName = "fleet-agent-direct-state"
	// Port is the container port of the endpoint.
	Port = 8443
	// AuthenticatePath is the token webhook (TokenReview) the downstream API
	// server may call (mode webhook).
	AuthenticatePath = "/authenticate"
)

// RequestToken asks fleet-proxy, through the upstream API server of cfg and
// as cfg's user, for a direct token for Cluster ws/name living ttl (zero:
// one hour), showing the credential the request is made with (the bearer
// token as it leaves, whatever gave it: a token, a token file, an exec
// plugin; or the client certificate of cfg), so that the token lives no
// longer than it. A refusal is the *apierrors.StatusError fleet-proxy (or
// the API server) answered.
func RequestToken(ctx context.Context, cfg *rest.Config, ws, name string, ttl time.Duration) (*TokenResponse, error) {
	cfg = rest.CopyConfig(cfg)
	// Innermost: it sees the Authorization header the auth wrappers set.
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return bearerInBody{next: rt} })
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	var treq TokenRequest
	treq.Kind, treq.APIVersion = TokenRequestKind, APIVersion
	treq.Spec.ExpirationSeconds = int64(ttl / time.Second)
	if cert := clientCertificate(cfg); cert != "" {
		treq.Spec.Credential = &Credential{ClientCertificate: cert}
	}
	body, err := json.Marshal(treq)
	if err != nil {
		return nil, err
	}
	host := strings.TrimSuffix(cfg.Host, "/")
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, host+TokenPath(ws, name), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		var st metav1.Status
		if json.Unmarshal(raw, &st) == nil && st.Kind == "Status" {
			return nil, &apierrors.StatusError{ErrStatus: st}
		}
		return nil, apierrors.NewGenericServerResponse(resp.StatusCode, http.MethodPost, schema.GroupResource{Group: "proxy.fleet.cattle.io", Resource: "clusters/token"}, name, string(raw), 0, false)
	}
	var out TokenResponse
	if err := json.Unmarshal(raw, &out); err != nil || out.Status.Token == "" {
		return nil, fmt.Errorf("the answer to a direct token request for %s/%s is not a %s", ws, name, TokenResponseKind)
	}
	return &out, nil
}

// clientCertificate is the PEM leaf of cfg's client certificate ("" when
// it has none it can read).
func clientCertificate(cfg *rest.Config) string {
	data := cfg.CertData
	if len(data) == 0 && cfg.CertFile != "" {
		data, _ = os.ReadFile(cfg.CertFile)
	}
	for len(data) > 0 {
		var blk *pem.Block
		if blk, data = pem.Decode(data); blk == nil {
			break
		}
		if blk.Type == "CERTIFICATE" {
			return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: blk.Bytes}))
		}
	}
	return ""
}

// bearerInBody puts the request's bearer token, as it leaves, into the
// token request's spec.credential.token: exactly the credential the API
// server authenticates the request with.
type bearerInBody struct{ next http.RoundTripper }

func (b bearerInBody) RoundTrip(r *http.Request) (*http.Response, error) {
	a := r.Header.Get("Authorization")
	if r.Method != http.MethodPost || r.Body == nil || len(a) <= 7 || !strings.EqualFold(a[:7], "bearer ") {
		return b.next.RoundTrip(r)
	}
	raw, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return nil, err
	}
	var treq TokenRequest
	if err := json.Unmarshal(raw, &treq); err == nil && treq.Kind == TokenRequestKind {
		if treq.Spec.Credential == nil {
			treq.Spec.Credential = &Credential{}
		}
		treq.Spec.Credential.Token = strings.TrimSpace(a[7:])
		if nb, err := json.Marshal(treq); err == nil {
			raw = nb
		}
	}
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(raw))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
	r.ContentLength = int64(len(raw))
	return b.next.RoundTrip(r)
}
