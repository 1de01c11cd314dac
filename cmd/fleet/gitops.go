package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/gitops/charts"
	gitopscontroller "github.com/gitops-fleet/fleet/gitops/controller"
	"github.com/gitops-fleet/fleet/gitops/gitsource"
	"github.com/gitops-fleet/fleet/gitops/webhook"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// gitopsFlags are fleet gitops' flags.
type gitopsFlags struct {
	kubeconfig, namespace, configName      string
	cacheDir, metricsAddress, probeAddress string
	leaderElect                            bool
	concurrency                            int
	listTTL, pruneInterval                 time.Duration
	knownHostsFile                         string
	allowHTTPCredentials                   bool
	// webhookListen is the webhook receiver's address (i30-webhook adds
	// the flag and the server next to the manager below).
	webhookListen string
}

func newGitopsCommand() *cobra.Command {
	var f gitopsFlags
	var logs logOptions
	cmd := &cobra.Command{
		Use:   "gitops",
		Short: "Run the source component: GitRepos to Bundles (the only part of fleet that reaches git servers and chart repositories)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := logs.setup(); err != nil {
				return err
			}
			logStart(ctrl.Log, "gitops")
			return runGitops(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the upstream cluster (default: in-cluster, or $KUBECONFIG)")
	fl.StringVar(&f.namespace, "namespace", envOr("NAMESPACE", config.DefaultSystemNamespace), "system namespace (controller ConfigMap, leader election Lease)")
	fl.StringVar(&f.configName, "config-name", config.ConfigMapName, "name of the controller ConfigMap (allowGitInsecureSkipTLSVerify)")
	fl.StringVar(&f.cacheDir, "cache-dir", "/var/cache/fleet-gitops", "directory of the git cache (repositories and checkouts; reused after a restart)")
	fl.StringVar(&f.metricsAddress, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint (0 disables it)")
	fl.StringVar(&f.probeAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fl.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader among replicas (Lease fleet-gitops-lock in --namespace)")
	fl.IntVar(&f.concurrency, "concurrency", gitopscontroller.DefaultConcurrency, "GitRepos reconciled at once")
	fl.DurationVar(&f.listTTL, "list-ttl", 5*time.Second, "how long one ls-remote answer is shared by GitRepos on the same repository with the same credentials")
	fl.DurationVar(&f.pruneInterval, "cache-prune-interval", gitopscontroller.DefaultPruneInterval, "how often cached repositories no GitRepo names are removed")
	fl.StringVar(&f.knownHostsFile, "known-hosts-file", "", "SSH known_hosts used for client Secrets without known_hosts (empty: every SSH Secret must hold its own)")
	fl.BoolVar(&f.allowHTTPCredentials, "allow-http-credentials", false, "let git credentials go to http:// (clear text) repositories")
	fl.StringVar(&f.webhookListen, "webhook-listen", ":8090", "address of the webhook receiver (Service fleet-gitops-webhook); empty turns it off")
	logs.addFlags(cmd)
	return cmd
}

func runGitops(cmd *cobra.Command, f gitopsFlags) error {
	ctx := cmd.Context()
	if f.kubeconfig != "" {
		_ = os.Setenv("KUBECONFIG", f.kubeconfig)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("finding the upstream cluster: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "fleet-gitops"
	var knownHosts []byte
	if f.knownHostsFile != "" {
		if knownHosts, err = os.ReadFile(f.knownHostsFile); err != nil {
			return fmt.Errorf("--known-hosts-file: %w", err)
		}
	}
	cache, err := gitsource.New(gitsource.Options{
		Root: f.cacheDir, ListTTL: f.listTTL, KnownHosts: knownHosts,
		// Whether a GitRepo may skip TLS verification is decided per pass
		// from the configuration (allowGitInsecureSkipTLSVerify), which
		// changes without a restart: restriction.Evaluate refuses the
		// GitRepo before the cache is asked.
		AllowInsecureSkipTLSVerify: true,
		AllowHTTPCredentials:       f.allowHTTPCredentials,
	})
	if err != nil {
		return fmt.Errorf("--cache-dir: %w", err)
	}

	mgrOpts := gitopscontroller.ManagerOptions(f.namespace)
	mgrOpts.Metrics = metricsserver.Options{BindAddress: f.metricsAddress}
	mgrOpts.HealthProbeBindAddress = f.probeAddress
	mgrOpts.LeaderElection = f.leaderElect
	mgrOpts.LeaderElectionID = "fleet-gitops-lock"
	mgrOpts.LeaderElectionNamespace = f.namespace
	mgrOpts.LeaderElectionReleaseOnCancel = true
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	store := configstore.New(f.namespace, f.configName, nil)
	if err := store.SetupWithManager(mgr); err != nil {
		return err
	}
	rec := gitopscontroller.New(mgr.GetClient(), mgr.GetAPIReader(), gitopscontroller.Options{
		Cache:         cache,
		Charts:        charts.NewFetcher(charts.Options{}),
		Config:        store,
		Concurrency:   f.concurrency,
		PruneInterval: f.pruneInterval,
	})
	if err := rec.SetupWithManager(mgr); err != nil {
		return err
	}
	if f.webhookListen != "" {
		if _, err := webhook.Setup(ctx, mgr, f.webhookListen, webhook.Options{Trigger: rec.Trigger}); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("config", store.ReadyCheck); err != nil {
		return err
	}
	return reconciler.RunManager(ctx, mgr, reconciler.ManagerStopWithin)
}
