package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/gitops-fleet/fleet/controller"
	"github.com/gitops-fleet/fleet/controller/bundle"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/renderservice"
)

func newControllerCommand() *cobra.Command {
	opts := controller.Options{}
	var kubeconfig string
	var logs logOptions
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the upstream controller (registration, agent management)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := logs.setup(); err != nil {
				return err
			}
			logStart(ctrl.Log, "controller")
			if kubeconfig != "" {
				_ = os.Setenv("KUBECONFIG", kubeconfig)
			}
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return fmt.Errorf("finding the upstream cluster: %w", err)
			}
			opts.RestConfig = cfg
			c, err := controller.New(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return c.Start(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the upstream cluster (default: in-cluster, or $KUBECONFIG)")
	f.StringVar(&opts.Namespace, "namespace", envOr("NAMESPACE", config.DefaultSystemNamespace), "system namespace (ConfigMap, leader election Lease)")
	f.StringVar(&opts.ConfigName, "config-name", config.ConfigMapName, "name of the controller ConfigMap")
	f.StringVar(&opts.MetricsAddress, "metrics-address", ":8080", "address of the Prometheus metrics endpoint (0 disables it)")
	f.StringVar(&opts.ProbeAddress, "probe-address", ":8081", "address of /healthz and /readyz")
	f.StringVar(&opts.PprofAddress, "pprof-address", "", "address of net/http/pprof (off when empty)")
	f.BoolVar(&opts.LeaderElect, "leader-elect", true, "elect a leader among replicas")
	f.DurationVar(&opts.LeaseDuration, "leader-election-lease-duration", 30*time.Second, "leader election lease duration")
	f.DurationVar(&opts.RenewDeadline, "leader-election-renew-deadline", 20*time.Second, "leader election renew deadline")
	f.DurationVar(&opts.RetryPeriod, "leader-election-retry-period", 5*time.Second, "leader election retry period")
	f.IntVar(&opts.Workers, "workers", 10, "concurrent Cluster reconciles")
	f.IntVar(&opts.BundleWriters, "bundle-writers", bundle.DefaultWriters, "clusters whose BundleDeployment and content one Bundle reconcile writes at once (a Bundle change on many clusters is bounded by it and by the upstream API server's write rate)")
	f.IntVar(&opts.Shard.Index, "shard-index", 0, "this replica's shard, in [0, --shard-count)")
	f.IntVar(&opts.Shard.Count, "shard-count", 1, "number of shards splitting the clusters between controller replicas")
	f.Float32Var(&opts.QPS, "kube-api-qps", controller.DefaultQPS, "requests per second to the upstream API server (client-side limit)")
	f.IntVar(&opts.Burst, "kube-api-burst", controller.DefaultBurst, "request burst to the upstream API server")
	f.DurationVar(&opts.CAPIPollInterval, "capi-poll-interval", 30*time.Second, "while Cluster API auto-registration is on, how often to look for the cluster.x-k8s.io API until it is served")
	f.StringVar(&opts.RendererURL, "renderer-url", "", "render Bundles in the renderer service at this https URL (fleet renderer, Deployment fleet-renderer); empty: in render workers inside this pod (weaker: they run beside this process's credential)")
	f.StringVar(&opts.RendererSecret, "renderer-secret", renderservice.SecretName, "Secret in --namespace with the renderer's credentials (made by the controller)")
	logs.addFlags(cmd)
	return cmd
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
