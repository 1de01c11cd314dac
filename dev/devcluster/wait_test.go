package devcluster

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A component that exited ends the wait at once, however deep in the error
// its exit is; anything else is waited out until the deadline.
func TestWaitFor_StopsAtAnExitedComponent(t *testing.T) {
	exited := &exitedError{name: "kube-apiserver", err: errors.New("exit status 1"), log: "/tmp/x.log"}
	start := time.Now()
	err := waitFor(t.Context(), time.Minute, func() error { return fmt.Errorf("upstream: %w", exited) })
	if !errors.Is(err, exited) || time.Since(start) > 10*time.Second {
		t.Errorf("waitFor returned %v after %s, want the exit at once", err, time.Since(start))
	}
	calls := 0
	err = waitFor(t.Context(), 500*time.Millisecond, func() error { calls++; return errors.New("not ready yet") })
	if err == nil || calls < 2 {
		t.Errorf("waitFor gave up after %d calls: %v", calls, err)
	}
}
