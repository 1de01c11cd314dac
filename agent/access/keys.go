package access

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/assertion"
)

// maxKeySetSize bounds the signing keys document.
const maxKeySetSize = 1 << 20

// UpstreamKeys returns a RefreshKeys that reads the signing keys from the
// upstream API server (assertion.SigningKeysPath) as the agent's request
// identity, trusting only the CA of upstream.
func UpstreamKeys(upstream *rest.Config) (func(context.Context) (*assertion.KeySet, error), error) {
	hc, err := rest.HTTPClientFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("access: client for the signing keys: %w", err)
	}
	host := strings.TrimSuffix(upstream.Host, "/")
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	url := host + assertion.SigningKeysPath
	return func(ctx context.Context) (*assertion.KeySet, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("getting the signing keys: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("getting the signing keys: %s", resp.Status)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxKeySetSize+1))
		if err != nil {
			return nil, fmt.Errorf("reading the signing keys: %w", err)
		}
		if len(body) > maxKeySetSize {
			return nil, fmt.Errorf("the signing keys document is larger than %d bytes", maxKeySetSize)
		}
		return assertion.ParseKeySet(body)
	}, nil
}

// maxRevocations bounds the revocation list document.
const maxRevocations = 4 << 20

// UpstreamRevocations returns a function that reads the revoked direct
// tokens of Cluster ws/name from the upstream API server
// (proxyv1.RevocationsPath) as the agent's request identity; given the ETag
// of the last answer it returns a nil list when nothing changed.
func UpstreamRevocations(upstream *rest.Config, ws, name string) (func(ctx context.Context, etag string) ([]proxyv1.RevokedToken, string, error), error) {
	hc, err := rest.HTTPClientFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("access: client for the revocation list: %w", err)
	}
	host := strings.TrimSuffix(upstream.Host, "/")
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	u := host + proxyv1.RevocationsPath(ws, name)
	return func(ctx context.Context, etag string) ([]proxyv1.RevokedToken, string, error) {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, "", err
		}
		req.Header.Set("Accept", "application/json")
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusNotModified:
			return nil, etag, nil
		case http.StatusOK:
		default:
			return nil, "", fmt.Errorf("reading the revocation list: %s", resp.Status)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxRevocations+1))
		if err != nil {
			return nil, "", err
		}
		if len(body) > maxRevocations {
			return nil, "", fmt.Errorf("the revocation list is larger than %d bytes", maxRevocations)
		}
		var r proxyv1.DirectTokenRevocations
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, "", fmt.Errorf("the revocation list: %w", err)
		}
		if r.Revoked == nil {
			r.Revoked = []proxyv1.RevokedToken{}
		}
		return r.Revoked, resp.Header.Get("ETag"), nil
	}, nil
}
