package main

import (
	"os"
	"testing"

	"github.com/gitops-fleet/fleet/internal/renderworker"
)

// TestMain lets this test binary be a render worker, as the fleet binary is:
// `fleet render bundle` and the controller the examples test starts render
// Bundles in workers started from the running binary.
func TestMain(m *testing.M) {
	renderworker.ServeIfWorker()
	os.Exit(m.Run())
}
