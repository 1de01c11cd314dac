package controlplane

import (
	"testing"
	"time"
)

// Eventually polls cond every 100ms until it returns nil, and fails the test
// with cond's last error when timeout passes. Tests of every package that
// runs control planes wait this way.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
}
