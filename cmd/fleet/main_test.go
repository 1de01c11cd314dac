package main

import (
	"testing"

	"github.com/gitops-fleet/fleet/internal/dev/testenv"
)

// TestMain lets this test binary be a render worker, as the fleet binary is
// (`fleet render bundle` and the controller the examples test starts render
// Bundles in workers started from the running binary), and sets up the log
// as every suite does. Tests that need control planes start their own.
func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{}, nil)
}
