package controlplane

import (
	"flag"
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

// Fuzzing reports whether the test binary runs a fuzz target (go test
// -fuzz): fuzz targets test pure functions, so a TestMain that starts control
// planes skips them, in the coordinator and in every fuzz worker. Call it in
// TestMain after flag.Parse.
func Fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}
