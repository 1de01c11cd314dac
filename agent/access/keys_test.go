package access

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/gitops-fleet/fleet/internal/assertion"
)

// TestUnknownKeyRefreshes rotates the signing key: an assertion by the new
// key is refused until the keys are read again from upstream, which the
// handler does on an unknown kid, at most every RefreshMinInterval.
func TestUnknownKeyRefreshes(t *testing.T) {
	f := newFixture(t)
	old := f.signer
	rotated := newSigner(t)
	var served atomic.Pointer[assertion.KeySet]
	served.Store(assertion.NewKeySet(old.PublicKey()))
	var gets atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != assertion.SigningKeysPath {
			http.NotFound(w, r)
			return
		}
		gets.Add(1)
		_ = json.NewEncoder(w).Encode(served.Load())
	}))
	defer upstream.Close()
	refresh, err := UpstreamKeys(&rest.Config{Host: upstream.URL})
	if err != nil {
		t.Fatal(err)
	}
	f.h.opts.RefreshKeys = refresh

	alice := assertion.Identity{User: "alice"}
	// Upstream still serves the old key only: refused, one GET.
	f.signer = rotated
	if code, _ := f.raw(alice, http.MethodGet, "/api", "", nil); code != http.StatusUnauthorized {
		t.Errorf("before the rotation upstream: %d", code)
	}
	// Now upstream serves both; within RefreshMinInterval no new GET.
	served.Store(assertion.NewKeySet(old.PublicKey(), rotated.PublicKey()))
	if code, _ := f.raw(alice, http.MethodGet, "/api", "", nil); code != http.StatusUnauthorized {
		t.Errorf("refresh rate-limited: %d", code)
	}
	if n := gets.Load(); n != 1 {
		t.Errorf("%d GETs, want 1", n)
	}
	f.h.refreshMu.Lock()
	f.h.lastRefresh = f.clock().Add(-RefreshMinInterval)
	f.h.refreshMu.Unlock()
	if code, body := f.raw(alice, http.MethodGet, "/api", "", nil); code != http.StatusOK {
		t.Errorf("after the refresh: %d %s", code, body)
	}
	// Both keys are trusted during the rotation.
	f.signer = old
	if code, _ := f.raw(alice, http.MethodGet, "/api", "", nil); code != http.StatusOK {
		t.Errorf("old key during the rotation: %d", code)
	}
}
