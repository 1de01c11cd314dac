package testenv

import (
	"errors"
	"flag"
	"testing"
	"time"
)

// PollInterval is how often Eventually checks its condition.
const PollInterval = 100 * time.Millisecond

// Condition is what Eventually waits for: a func returning nil once it
// holds (its last error is the failure message), or a func returning true
// once it holds (with an error, if any, for the failure message).
type Condition interface {
	func() error | func() (bool, error)
}

var errNotYet = errors.New("condition not met")

// Eventually checks cond every PollInterval until it holds and returns how
// long that took; after timeout it fails the test naming what it waited for
// and cond's last error. Every wait of the envtest suites is bounded this
// way: nothing waits on an unbounded channel or sleeps a fixed time hoping
// it is enough.
func Eventually[C Condition](t testing.TB, timeout time.Duration, what string, cond C) time.Duration {
	t.Helper()
	var check func() error
	switch c := any(cond).(type) {
	case func() error:
		check = c
	case func() (bool, error):
		check = func() error {
			ok, err := c()
			switch {
			case ok:
				return nil
			case err == nil:
				return errNotYet
			}
			return err
		}
	}
	start := time.Now()
	var err error
	for {
		if err = check(); err == nil {
			return time.Since(start)
		}
		if time.Since(start) >= timeout {
			break
		}
		time.Sleep(PollInterval)
	}
	t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
	return 0
}

// Fuzzing reports whether the test binary runs a fuzz target (go test
// -fuzz), as the coordinator or as a fuzz worker: fuzz targets test pure
// functions, so a TestMain that starts control planes starts none. Call it
// after flag.Parse (Main does).
func Fuzzing() bool {
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return true
		}
	}
	return false
}

// Consistently checks cond every PollInterval for d and fails the test at
// the first error: what must not happen within d did not.
func Consistently(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := cond(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(PollInterval)
	}
}
