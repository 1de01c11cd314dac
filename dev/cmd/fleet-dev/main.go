// Command fleet-dev is the development harness, kept out of the product
// binary: real local clusters on this machine (up, down, demo), the dev
// clusters' image archive (images) and the benchmarks (bench). It runs the
// product binary `fleet` it finds beside itself (bin/fleet; --fleet-binary
// or FLEET_BINARY name another) for everything the product does.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/internal/version"
)

func main() {
	// `fleet-dev bench` runs controllers in this process, and they render
	// in child processes of this binary.
	renderworker.ServeIfWorker()
	// Errors only, on stderr: the harness's clients (demo, bench) and the
	// controllers bench runs in this process log through controller-runtime,
	// which otherwise prints a warning with a stack trace after 30 s.
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapErrorLevel())))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCommand()
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := newDevCommand()
	root.Use = "fleet-dev"
	root.Version = version.Version
	root.SilenceErrors = true
	root.SilenceUsage = true
	root.AddCommand(newBenchCommand())
	return root
}

// fleetBinary is the product binary the harness runs: FLEET_BINARY, else
// `fleet` beside this binary (make build puts both in bin/).
func fleetBinary() (string, error) {
	if p := os.Getenv("FLEET_BINARY"); p != "" {
		return filepath.Abs(p)
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(self), "fleet")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the product binary %s is missing (make build builds it; FLEET_BINARY names another): %w", p, err)
	}
	return p, nil
}
