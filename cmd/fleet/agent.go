package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/gitops-fleet/fleet/agent"
	"github.com/gitops-fleet/fleet/internal/config"
)

func newAgentCommand() *cobra.Command {
	opts := agent.Options{LeaderElect: true}
	var kubeconfig, probeAddress string
	var logs logOptions
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the downstream agent (registers the cluster, heartbeat, applies its Bundles)",
		Long: `Run the agent in a downstream cluster. Settings come from flags or, as the
fleet-agent chart sets them, from the environment: NAMESPACE, POD_NAME,
GENERATION, CHECKIN_INTERVAL, CATTLE_ELECTION_LEASE_DURATION,
CATTLE_ELECTION_RENEW_DEADLINE, CATTLE_ELECTION_RETRY_PERIOD, ACCESS,
TUNNEL_DOWN_LIMIT, DIRECT, DIRECT_MODE, DIRECT_URL, DIRECT_HOSTS,
DIRECT_API_AUDIENCES (comma separated) and LOG_LEVEL.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := logs.setup(); err != nil {
				return err
			}
			logStart(ctrl.Log, "agent")
			if kubeconfig != "" {
				_ = os.Setenv("KUBECONFIG", kubeconfig)
			}
			local, err := ctrl.GetConfig()
			if err != nil {
				return fmt.Errorf("finding the local cluster: %w", err)
			}
			opts.Local = local
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			opts.Registerer = reg
			if err := agentEnv(&opts); err != nil {
				return err
			}
			a, err := agent.New(opts)
			if err != nil {
				return err
			}
			if probeAddress != "" && probeAddress != "0" {
				if err := serveProbes(cmd.Context(), probeAddress, a.ReadyCheck, reg); err != nil {
					return err
				}
			}
			return a.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the local cluster (default: in-cluster, or $KUBECONFIG)")
	f.StringVar(&opts.Namespace, "namespace", envOr("NAMESPACE", config.DefaultSystemNamespace), "the agent's namespace")
	f.StringVar(&opts.PodName, "pod-name", os.Getenv("POD_NAME"), "this replica's name (leader election)")
	f.StringVar(&probeAddress, "probe-address", ":8081", "address of /healthz, /readyz and /metrics (0 disables them)")
	f.BoolVar(&opts.LeaderElect, "leader-elect", true, "elect one active replica")
	f.BoolVar(&opts.Access, "access", true, "hold a tunnel to the upstream's fleet-proxy and serve users' requests (every replica)")
	f.BoolVar(&opts.Direct, "direct", false, "serve the authorized cluster endpoint (every replica)")
	f.StringVar(&opts.DirectMode, "direct-mode", "agent", "agent (serve the Kubernetes API) or webhook (the API server's token webhook)")
	f.StringVar(&opts.DirectURL, "direct-url", "", "where users reach the direct endpoint")
	f.StringVar(&opts.DirectAddress, "direct-address", ":8443", "address the direct endpoint listens on")
	f.StringSliceVar(&opts.DirectAPIAudiences, "direct-api-audiences", nil, "mode webhook: the local API server's audiences (its --api-audiences), the only ones the token webhook answers for (default: asked of the API server)")
	logs.addFlags(cmd)
	return cmd
}

// agentEnv reads the settings the agent chart passes as environment
// variables; a malformed one is an error naming it.
func agentEnv(o *agent.Options) error {
	durations := []struct {
		name string
		into *time.Duration
	}{
		{"CHECKIN_INTERVAL", &o.CheckinInterval},
		{"CATTLE_ELECTION_LEASE_DURATION", &o.LeaseDuration},
		{"CATTLE_ELECTION_RENEW_DEADLINE", &o.RenewDeadline},
		{"CATTLE_ELECTION_RETRY_PERIOD", &o.RetryPeriod},
		{"TUNNEL_DOWN_LIMIT", &o.TunnelDownLimit},
	}
	var errs []error
	for _, d := range durations {
		if v := os.Getenv(d.name); v != "" {
			p, err := time.ParseDuration(v)
			if err != nil || p <= 0 {
				errs = append(errs, fmt.Errorf("environment variable %s=%q is not a positive Go duration such as 30s", d.name, v))
				continue
			}
			*d.into = p
		}
	}
	if v := os.Getenv("ACCESS"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("environment variable ACCESS=%q is not true or false", v))
		} else {
			o.Access = b
		}
	}
	if v := os.Getenv("DIRECT"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("environment variable DIRECT=%q is not true or false", v))
		} else {
			o.Direct = b
		}
	}
	if v := os.Getenv("DIRECT_MODE"); v != "" {
		o.DirectMode = v
	}
	if v := os.Getenv("DIRECT_URL"); v != "" {
		o.DirectURL = v
	}
	if v := os.Getenv("DIRECT_HOSTS"); v != "" {
		for h := range strings.SplitSeq(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				o.DirectHosts = append(o.DirectHosts, h)
			}
		}
	}
	if v := os.Getenv("DIRECT_API_AUDIENCES"); v != "" {
		for a := range strings.SplitSeq(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				o.DirectAPIAudiences = append(o.DirectAPIAudiences, a)
			}
		}
	}
	if v := os.Getenv("GENERATION"); v != "" {
		g, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("environment variable GENERATION=%q is not an integer", v))
		} else {
			o.Generation = &g
		}
	}
	return errors.Join(errs...)
}

// serveProbes serves /healthz (always ok while the process runs), /readyz
// and the agent's Prometheus metrics at /metrics.
func serveProbes(ctx context.Context, addr string, ready func(*http.Request) error, metrics prometheus.Gatherer) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("probe address %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() { _ = srv.Serve(ln) }()
	return nil
}
