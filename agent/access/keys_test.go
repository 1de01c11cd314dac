package access

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/dev/testenv"
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

// TestRunReadsTheKeys: Run reads the keys at start and every KeysInterval.
func TestRunReadsTheKeys(t *testing.T) {
	f := newFixture(t)
	next := newSigner(t)
	var gets atomic.Int32
	f.h.opts.KeysInterval = 100 * time.Millisecond
	f.h.opts.RefreshKeys = func(context.Context) (*assertion.KeySet, error) {
		if gets.Add(1) == 1 {
			return assertion.NewKeySet(f.signer.PublicKey()), nil
		}
		return assertion.NewKeySet(next.PublicKey()), nil
	}
	testenv.Start(t, "access handler", f.h.Run)
	testenv.Eventually(t, 30*time.Second, "the keys to be read again", func() error {
		if ids := f.h.opts.Verifier.Keys().KeyIDs(); gets.Load() < 2 || len(ids) != 1 || ids[0] != next.KeyID() {
			return errNotSeen("the rotated key")
		}
		return nil
	})
}
