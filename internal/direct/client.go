// Package direct is the authorized cluster endpoint's client side and the
// names the agent serves it under (docs/design/cluster-access.md,
// "Authorized cluster endpoint"); its wire types are the aggregated API's,
// in api/proxy/v1alpha1.
package direct

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
)

// RequestToken asks fleet-proxy, through the upstream API server of cfg and
// as cfg's user, for a direct token for Cluster ws/name living ttl (zero:
// one hour), showing the credential the request is made with (the bearer
// token as it leaves, whatever gave it: a token, a token file, an exec
// plugin; or the client certificate of cfg), so that the token lives no
// longer than it. A refusal is the *apierrors.StatusError fleet-proxy (or
// the API server) answered.
func RequestToken(ctx context.Context, cfg *rest.Config, ws, name string, ttl time.Duration) (*proxyv1.DirectToken, error) {
	cfg = rest.CopyConfig(cfg)
	// Innermost: it sees the Authorization header the auth wrappers set.
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return bearerInBody{next: rt} })
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	var treq proxyv1.DirectTokenRequest
	treq.Kind, treq.APIVersion = proxyv1.DirectTokenRequestKind, proxyv1.APIVersion
	treq.Spec.ExpirationSeconds = int64(ttl / time.Second)
	if cert := clientCertificate(cfg); cert != "" {
		treq.Spec.Credential = &proxyv1.Credential{ClientCertificate: cert}
	}
	body, err := json.Marshal(treq)
	if err != nil {
		return nil, err
	}
	host := strings.TrimSuffix(cfg.Host, "/")
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, host+proxyv1.TokenPath(ws, name), bytes.NewReader(body))
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
	var out proxyv1.DirectToken
	if err := json.Unmarshal(raw, &out); err != nil || out.Status.Token == "" {
		return nil, fmt.Errorf("the answer to a direct token request for %s/%s is not a %s", ws, name, proxyv1.DirectTokenKind)
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
	var treq proxyv1.DirectTokenRequest
	if err := json.Unmarshal(raw, &treq); err == nil && treq.Kind == proxyv1.DirectTokenRequestKind {
		if treq.Spec.Credential == nil {
			treq.Spec.Credential = &proxyv1.Credential{}
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
