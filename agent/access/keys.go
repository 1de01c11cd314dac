package access

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"k8s.io/client-go/rest"

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
