package access

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/assertion"
)

// TestUnknownKeyRefreshes rotates the signing key: an assertion by the new
// key is refused until the keys are read again from upstream, which the
// handler does on an unknown kid, at most every RefreshMinInterval; an
// assertion that comes too soon after a read waits for the next one
// instead of being refused (a fleet-proxy replica publishes its key at its
// start, possibly just after an agent read the keys), and requests that
// wait together share one read. The direct endpoint's check does not wait.
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
	if n := gets.Load(); n != 1 {
		t.Errorf("%d GETs, want 1", n)
	}
	// Now upstream serves both. Within RefreshMinInterval of the last read
	// (moved back so that 300 ms are left) the request waits, then one
	// read, and it verifies; a check that may not wait reads nothing.
	served.Store(assertion.NewKeySet(old.PublicKey(), rotated.PublicKey()))
	const left = 300 * time.Millisecond
	f.h.refreshMu.Lock()
	f.h.lastRefresh = f.clock().Add(-RefreshMinInterval + left)
	f.h.refreshMu.Unlock()
	if f.h.refreshOnUnknownKey(t.Context()) || gets.Load() != 1 {
		t.Errorf("the direct endpoint's check read the keys within RefreshMinInterval (%d GETs)", gets.Load())
	}
	start := time.Now()
	if code, body := f.raw(alice, http.MethodGet, "/api", "", nil); code != http.StatusOK {
		t.Errorf("an assertion of a key published just after the last read: %d %s", code, body)
	}
	if took := time.Since(start); took < left-50*time.Millisecond {
		t.Errorf("answered after %v: the read did not wait for the interval", took)
	}
	if n := gets.Load(); n != 2 {
		t.Errorf("%d GETs, want 2", n)
	}
	// Another rotation, four requests at once: they wait together and
	// share one read.
	third := newSigner(t)
	served.Store(assertion.NewKeySet(old.PublicKey(), rotated.PublicKey(), third.PublicKey()))
	f.h.refreshMu.Lock()
	f.h.lastRefresh = f.clock().Add(-RefreshMinInterval + left)
	f.h.refreshMu.Unlock()
	f.signer = third
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Go(func() { codes[i], _ = f.raw(alice, http.MethodGet, "/api", "", nil) })
	}
	wg.Wait()
	for i, code := range codes {
		if code != http.StatusOK {
			t.Errorf("request %d: %d", i, code)
		}
	}
	if n := gets.Load(); n != 3 {
		t.Errorf("%d GETs, want 3 (one for the four requests)", n)
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
