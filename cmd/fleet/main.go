// Command fleet is the product binary, the image's only program and the CLI
// users install: the upstream controller, the downstream agent, fleet-proxy,
// the renderer and the review tools (render, diff, kubeconfig, rollout,
// uninstall), as subcommands. The dev harness is dev/cmd/fleet-dev.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/internal/version"
)

func main() {
	// Helm's packages log through slog's default logger (to stderr, outside
	// the --log-level and format of the rest); the renderer returns every
	// failure as an error, so those lines only repeat it or are noise.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	// The renderer, the controller (without a renderer) and `fleet render
	// bundle` render Bundles in child processes of this binary; such a
	// child renders and exits here, before any command runs.
	renderworker.ServeIfWorker()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := execute(ctx, newRootCommand(), os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "fleet",
		Short:         "GitOps-native cluster registration: controller, agent, proxy, renderer and the review tools",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
	}
	root.SetVersionTemplate(versionLine(version.Get()) + "\n")
	root.AddCommand(newRenderCommand(), newControllerCommand(), newRendererCommand(), newAgentCommand(), newProxyCommand(), newKubeconfigCommand(), newDiffCommand(), newRolloutCommand(), newUninstallCommand(), newApplyCommand(), newGitopsCommand())
	root.AddCommand(newVersionCommand())
	return root
}
