package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/gitops-fleet/fleet/internal/controlplane"
)

func newDevCommand() *cobra.Command {
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Local development environment",
	}
	dev.AddCommand(newDevDemoCommand())
	return dev
}

func newDevDemoCommand() *cobra.Command {
	var (
		exit        bool
		stateDir    string
		downstreams int
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start a local upstream and downstream control planes and print how to reach them",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			start := time.Now()
			step := func(format string, args ...any) {
				fmt.Fprintf(out, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
			}
			step("starting upstream and %d downstream control planes", downstreams)
			env, err := controlplane.Start(ctx, controlplane.Options{Downstreams: downstreams})
			if err != nil {
				return fmt.Errorf("step 'start control planes' failed: %w", err)
			}
			defer func() {
				step("stopping control planes")
				_ = env.Stop()
			}()
			if err := os.MkdirAll(stateDir, 0o700); err != nil {
				return err
			}
			for _, cp := range env.All() {
				path := filepath.Join(stateDir, cp.Name+".kubeconfig")
				if err := os.WriteFile(path, cp.Kubeconfig, 0o600); err != nil {
					return err
				}
				step("%s ready: kubectl --kubeconfig %s get ns", cp.Name, path)
			}
			step("fleet CRDs installed upstream: kubectl --kubeconfig %s get crd",
				filepath.Join(stateDir, "upstream.kubeconfig"))
			if exit {
				return nil
			}
			step("up; press Ctrl-C to stop")
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().BoolVar(&exit, "exit", false, "exit 0 once everything is ready instead of staying up")
	cmd.Flags().StringVar(&stateDir, "state-dir", ".fleet-dev", "directory for kubeconfigs and state")
	cmd.Flags().IntVar(&downstreams, "downstream", 2, "number of downstream clusters")
	return cmd
}
