package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/gitops-fleet/fleet/dev/devcluster"
	"github.com/gitops-fleet/fleet/dev/devenv"
	"github.com/gitops-fleet/fleet/dev/images"
	"github.com/gitops-fleet/fleet/internal/version"
)

func newDevCommand() *cobra.Command {
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Real local Kubernetes clusters on this machine (root, containerd, no registry)",
	}
	dev.AddCommand(newDevImagesCommand(), newDevUpCommand(), newDevDownCommand(), newDevDemoCommand(), newDevGitServerCommand())
	return dev
}

type devFlags struct {
	stateDir    string
	binDir      string
	images      string
	slot        int
	downstreams int
}

func (f *devFlags) register(cmd *cobra.Command, withClusters bool) {
	cmd.Flags().StringVar(&f.stateDir, "state-dir", ".fleet-dev", "directory for the clusters' state, kubeconfigs and logs")
	if !withClusters {
		return
	}
	binDir := os.Getenv("FLEET_BIN_DIR")
	if binDir == "" {
		binDir = "bin"
	}
	cmd.Flags().StringVar(&f.binDir, "bin-dir", binDir, "the directory `DIR` holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, helm (make dev-bins builds them)")
	cmd.Flags().StringVar(&f.images, "images", filepath.Join(binDir, "images", "images.tar"), "the image archive `FILE` imported into every node (make images builds it)")
	cmd.Flags().IntVar(&f.slot, "slot", 0, "0-9: environments in different slots use different ports and subnets and can run side by side")
	cmd.Flags().IntVar(&f.downstreams, "downstream", 2, "number of downstream clusters")
}

func (f *devFlags) plan() (*devcluster.State, error) {
	names := []string{"upstream"}
	for i := 1; i <= f.downstreams; i++ {
		names = append(names, fmt.Sprintf("dev-%d", i))
	}
	return devcluster.Plan(f.stateDir, f.slot, names...)
}

// stepper prints one line per step with the time since start.
type stepper struct {
	out   io.Writer
	start time.Time
	mu    sync.Mutex
}

func (s *stepper) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, "[%6.1fs] %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

func (s *stepper) progress(cluster, step string, took time.Duration) {
	s.printf("%-9s %s (%.1fs)", cluster, step, took.Seconds())
}

func newDevImagesCommand() *cobra.Command {
	var fleetBin, pauseBin, out, fleetOut, repo, tag string
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Pack static fleet and pause binaries into an image archive containerd imports",
		Long: `Pack static fleet and pause binaries into one image archive the dev clusters
import (--out), and the fleet image alone into another (--fleet-out) for pushing
to a registry: crane push bin/images/fleet.tar REGISTRY/fleet:TAG.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return err
			}
			ref := repo + ":" + tag
			fleetImage := images.FleetSpec(ref, fleetBin, nil)
			err := images.WriteArchive(out, fleetImage,
				// The kubelet's sandbox image, and what the example Bundle runs.
				images.Spec{Ref: "registry.k8s.io/pause:3.10", Binary: pauseBin, Entrypoint: "pause", User: "65535"},
			)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s, registry.k8s.io/pause:3.10\n", out, ref)
			if fleetOut != "" {
				if err := images.WriteArchive(fleetOut, fleetImage); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s\n", fleetOut, ref)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&fleetBin, "fleet-binary", "bin/images/fleet", "static fleet binary")
	cmd.Flags().StringVar(&pauseBin, "pause-binary", "bin/images/pause", "static pause binary")
	cmd.Flags().StringVar(&out, "out", "bin/images/images.tar", "archive to write (fleet and pause images)")
	cmd.Flags().StringVar(&fleetOut, "fleet-out", "", "also write the fleet image alone to this archive")
	cmd.Flags().StringVar(&repo, "repo", "docker.io/gitops-fleet/fleet", "repository of the fleet image")
	cmd.Flags().StringVar(&tag, "tag", version.Version, "tag of the fleet image (the charts' default is their appVersion)")
	return cmd
}

func newDevUpCommand() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start an upstream and N downstream real clusters (stay up until `fleet-dev down`)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			st := &stepper{out: cmd.OutOrStdout(), start: time.Now()}
			s, err := devUp(cmd.Context(), &f, st)
			if err != nil {
				return err
			}
			printKubeconfigs(st, s)
			return nil
		},
	}
	f.register(cmd, true)
	return cmd
}

func devUp(ctx context.Context, f *devFlags, st *stepper) (*devcluster.State, error) {
	s, err := f.plan()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(f.images); err != nil {
		return nil, fmt.Errorf("image archive %s is missing: run `make images`", f.images)
	}
	bin, err := filepath.Abs(f.binDir)
	if err != nil {
		return nil, err
	}
	st.printf("starting %d clusters in %s (slot %d)", len(s.Clusters), s.Dir, s.Slot)
	// dev-1's API server takes its fleet agent as token webhook (the
	// direct endpoint's mode webhook; docs/operations.md, "Direct access").
	err = devcluster.Up(ctx, s, devcluster.Options{BinDir: bin, Images: []string{f.images}, Progress: st.progress,
		DirectWebhook: []string{"dev-1"}})
	if err != nil {
		return s, fmt.Errorf("step 'clusters up' failed: %w\n(`fleet-dev down --state-dir %s` removes what was started)", err, f.stateDir)
	}
	return s, nil
}

func printKubeconfigs(st *stepper, s *devcluster.State) {
	for _, c := range s.Clusters {
		st.printf("%-9s kubectl --kubeconfig %s get pods -A   (from pods: %s)", c.Name,
			filepath.Join(s.Dir, c.Name+".kubeconfig"), c.Server())
	}
}

func newDevDownCommand() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the dev clusters and remove every process, mount, iptables rule, bridge and cgroup they made",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return devDown(cmd.OutOrStdout(), f.stateDir)
		},
	}
	f.register(cmd, false)
	return cmd
}

func devDown(out io.Writer, stateDir string) error {
	s, err := devcluster.Load(stateDir)
	if err != nil {
		return err
	}
	if s == nil {
		fmt.Fprintf(out, "nothing to stop in %s\n", stateDir)
		return nil
	}
	start := time.Now()
	r, err := devcluster.Down(stateDir)
	if err != nil {
		return err
	}
	if left := devcluster.Leftovers(s); len(left) > 0 {
		return fmt.Errorf("left behind:\n  %s", strings.Join(left, "\n  "))
	}
	fmt.Fprintf(out, "stopped %d clusters (%d processes, %d mounts) in %.1fs; nothing left behind; logs kept in %s/*/logs\n",
		r.Clusters, r.Processes, r.Mounts, time.Since(start).Seconds(), s.Dir)
	return nil
}

func newDevDemoCommand() *cobra.Command {
	var (
		f    devFlags
		exit bool
		repo string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Real clusters, the controller installed with helm, dev-1 registered by a GitRepo from examples/gitops on a local git server (kubeconfig encrypted with SOPS), dev-2 by its agent, a Bundle on both, a redeployAgentGeneration commit",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st := &stepper{out: cmd.OutOrStdout(), start: time.Now()}
			if f.downstreams < 2 {
				return fmt.Errorf("--downstream %d: the demo needs 2 (dev-1 manager-initiated, dev-2 agent-initiated)", f.downstreams)
			}
			s, err := devUp(ctx, &f, st)
			if err != nil {
				return err
			}
			stopGit := func() {}
			down := func() {
				stopGit()
				st.printf("stopping the clusters")
				if err := devDown(cmd.OutOrStdout(), f.stateDir); err != nil {
					st.printf("fleet-dev down: %v", err)
				}
			}
			if err := runDemo(ctx, st, s, &f, repo, &stopGit); err != nil {
				st.printf("FAILED: %v", err)
				st.printf("the clusters stay up for inspection; `fleet-dev down --state-dir %s` stops them", f.stateDir)
				return fmt.Errorf("demo failed")
			}
			if exit {
				down()
				return nil
			}
			printKubeconfigs(st, s)
			st.printf("up; press Ctrl-C to stop and clean up")
			<-ctx.Done()
			down()
			return nil
		},
	}
	f.register(cmd, true)
	cmd.Flags().BoolVar(&exit, "exit", false, "exit 0 once everything is Ready (non-zero naming the failing step otherwise) and stop the clusters")
	cmd.Flags().StringVar(&repo, "repo", ".", "repository root (charts/, examples/gitops)")
	return cmd
}

// runDemo runs the demo's steps; *stopGit is set to what stops its git
// server (it serves the GitRepo as long as the demo runs).
func runDemo(ctx context.Context, st *stepper, s *devcluster.State, f *devFlags, repo string, stopGit *func()) error {
	repo, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	helm, err := filepath.Abs(filepath.Join(f.binDir, "helm"))
	if err != nil {
		return err
	}
	env := &devenv.Env{State: s, RepoDir: repo, Helm: helm}
	up, dev1, dev2 := s.Clusters[0], s.Clusters[1], s.Clusters[2]
	t := time.Now()
	if err := env.InstallController(ctx); err != nil {
		return fmt.Errorf("step 'helm install fleet charts/fleet' failed: %w", err)
	}
	st.printf("upstream  helm install fleet charts/fleet: controller running (%.1fs)", time.Since(t).Seconds())
	upc, err := devenv.Client(up)
	if err != nil {
		return err
	}

	// The GitRepo lives in fleet-local: the local cluster's agent applies
	// the repository upstream.
	t = time.Now()
	if _, err := devenv.ClusterReady(ctx, upc, "fleet-local", "local", 3*time.Minute); err != nil {
		return fmt.Errorf("step 'upstream registered itself as fleet-local/local' failed: %w\nread: kubectl --kubeconfig %s -n %s logs deploy/fleet-controller; kubectl --kubeconfig %s -n %s logs deploy/fleet-agent",
			err, up.KubeconfigPath(), devenv.SystemNamespace, up.KubeconfigPath(), devenv.SystemNamespace)
	}
	st.printf("upstream  registered itself as fleet-local/local: agent pushed into %s, Cluster Ready (%.1fs)", devenv.SystemNamespace, time.Since(t).Seconds())

	g, stop, err := demoFromGit(ctx, st, s, repo, upc)
	if stop != nil {
		*stopGit = stop
	}
	if err != nil {
		return err
	}

	t = time.Now()
	values, err := devenv.TokenValues(ctx, upc, "fleet-default", "dev-token")
	if err != nil {
		return fmt.Errorf("step 'token dev-token values' failed: %w", err)
	}
	if err := env.InstallAgent(ctx, dev2, devenv.SystemNamespace, values, "clientID=dev-2", "labels.env=dev"); err != nil {
		return fmt.Errorf("step 'helm install fleet-agent in dev-2' failed: %w", err)
	}
	dev2Cluster, err := devenv.ClusterByClientID(ctx, upc, "fleet-default", "dev-2", 3*time.Minute)
	if err != nil {
		return fmt.Errorf("step 'dev-2 registered (agent-initiated)' failed: %w\nread: kubectl --kubeconfig %s -n %s logs deploy/fleet-agent",
			err, dev2.KubeconfigPath(), devenv.SystemNamespace)
	}
	st.printf("dev-2     registered agent-initiated: helm install fleet-agent with dev-token's values, Cluster Ready (%.1fs)", time.Since(t).Seconds())

	t = time.Now()
	if err := devenv.BundleReady(ctx, upc, "fleet-default", "hello", 2, 3*time.Minute); err != nil {
		return fmt.Errorf("step 'Bundle hello Ready on dev-1 and dev-2' failed: %w", err)
	}
	st.printf("upstream  Bundle hello Ready on dev-1 and dev-2 (%.1fs)", time.Since(t).Seconds())

	if err := demoBump(ctx, st, g, dev1); err != nil {
		return err
	}

	out, err := exec.CommandContext(ctx, filepath.Join(f.binDir, "kubectl"), "--kubeconfig", up.KubeconfigPath(),
		"get", "gitrepos.fleet.cattle.io,clusters.fleet.cattle.io", "-A").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl get clusters: %v: %s", err, out)
	}
	st.printf("kubectl get gitrepos.fleet.cattle.io,clusters.fleet.cattle.io -A\n%s", out)
	return demoAccess(ctx, st, s, f, upc, dev2Cluster.Name)
}
