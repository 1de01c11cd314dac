package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/scheme"
	"github.com/gitops-fleet/fleet/internal/tunnel"
	"github.com/gitops-fleet/fleet/proxy"
	"github.com/gitops-fleet/fleet/proxy/connected"
)

// recheckPeriod is how often the agents' open tunnels are checked against
// the identity mapping besides on every change of what it reads.
const recheckPeriod = time.Minute

func newProxyCommand() *cobra.Command {
	var kubeconfig, namespace, service, listen, certFile, keyFile, caFile, podIP, metricsAddr, replica string
	var directMaxLifetime, directUnverifiedLifetime, directRecheck, directIssueWindow time.Duration
	var directPerUser, directIssueLimit int
	var setCABundle bool
	var logs logOptions
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run fleet-proxy, the aggregated API server proxy.fleet.cattle.io that serves users' requests to registered clusters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if _, err := logs.setup(); err != nil {
				return err
			}
			logStart(ctrl.Log, "proxy")
			if kubeconfig != "" {
				_ = os.Setenv("KUBECONFIG", kubeconfig)
			}
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return fmt.Errorf("finding the upstream cluster: %w", err)
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			var cert tls.Certificate
			// ca verifies the serving certificate, which every replica
			// shares: the aggregator trusts it, and so do the peers.
			var ca []byte
			if certFile != "" || keyFile != "" {
				if cert, err = tls.LoadX509KeyPair(certFile, keyFile); err != nil {
					return fmt.Errorf("loading the serving certificate: %w", err)
				}
				if caFile != "" {
					if ca, err = os.ReadFile(caFile); err != nil {
						return fmt.Errorf("reading the serving certificate's CA: %w", err)
					}
				}
			} else {
				if cert, ca, err = proxy.EnsureServingCertificate(ctx, cs, namespace, service); err != nil {
					return err
				}
				if setCABundle {
					dc, err := dynamic.NewForConfig(cfg)
					if err != nil {
						return err
					}
					if err := proxy.SetAPIServiceCABundle(ctx, dc, ca); err != nil {
						return err
					}
				}
			}
			if replica == "" {
				if replica, err = connected.ReplicaName(); err != nil {
					return fmt.Errorf("naming this replica: %w", err)
				}
			}
			// This replica's signing key, in memory only; its public key
			// is published (and the Secret of earlier releases deleted)
			// before anything is signed with it.
			keys, err := proxy.StartSigningKeys(ctx, proxy.SigningOptions{Client: cs, Namespace: namespace, Replica: replica,
				Log: ctrl.Log.WithName("signing-keys")})
			if err != nil {
				return err
			}
			// The identity mapping of attach requests reads these, and
			// only these, from a cache: request ServiceAccounts (by their
			// registration label), ClusterRegistrations and Clusters.
			objs, err := proxy.IdentityCache(ctx, cfg)
			if err != nil {
				return err
			}
			ts := tunnel.NewServer(nil, crmetrics.Registry)
			ts.Log = ctrl.Log.WithName("tunnel")
			tunnels := proxy.NewTunnelServer(objs, ts)
			// An open tunnel ends when its identity loses the right.
			if err := tunnels.RecheckOnChange(ctx, objs, recheckPeriod); err != nil {
				return err
			}
			// The Connected condition and the tunnel events, written as
			// fleet-proxy (reads of Clusters go to the API server: a
			// write is decided on the version it is made against).
			writer, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
			if err != nil {
				return err
			}
			eb := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
			if err := eb.StartRecordingToSinkWithContext(ctx); err != nil {
				return err
			}
			defer eb.Shutdown()
			status, err := connected.New(connected.Options{
				Client: writer, Lister: objs, Holder: ts, Local: ts.Sessions, Replica: replica,
				Running:  connected.PodRunning(cs, namespace),
				Recorder: eb.NewRecorder(scheme.Scheme, "fleet-proxy"),
				Log:      ctrl.Log.WithName("connected"),
			})
			if err != nil {
				return err
			}
			ts.OnConnect, ts.OnDisconnect = status.Connected, status.Disconnected
			md, err := metadata.NewForConfig(cfg)
			if err != nil {
				return err
			}
			registry, err := proxy.NewRegistry(proxy.RegistryOptions{Client: cs, Metadata: md, Namespace: namespace,
				PerUser: directPerUser, IssueLimit: directIssueLimit, IssueWindow: directIssueWindow})
			if err != nil {
				return err
			}
			if err := registry.Start(ctx); err != nil {
				return err
			}
			srv, err := proxy.New(proxy.Options{Client: cs, Tunnels: tunnels, Attacher: tunnels, Asserter: keys, Keys: keys,
				Peer: ts.PeerHandler(), DirectIssuer: keys, Registry: registry, Agents: tunnels, DirectEndpoint: tunnels.DirectEndpoint,
				DirectTokenMaxLifetime: directMaxLifetime, DirectTokenUnverifiedMaxLifetime: directUnverifiedLifetime})
			if err != nil {
				return err
			}
			if err := srv.Start(ctx); err != nil {
				return err
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			// The replicas reach each other's agents: a user's request
			// may land on any replica, an agent's tunnel on one.
			if podIP == "" {
				ctrl.Log.Info("no pod IP (--pod-ip, $POD_IP): this replica peers with no other; run one replica only")
			} else {
				if len(ca) == 0 {
					return errors.New("peering with other replicas needs the CA of the serving certificate (--tls-ca-file)")
				}
				if err := tunnels.StartPeering(ctx, proxy.Peering{Client: cs, Namespace: namespace, Service: service,
					PodIP: podIP, Port: l.Addr().(*net.TCPAddr).Port, ServingCA: ca}); err != nil {
					return err
				}
			}
			g, ctx := errgroup.WithContext(ctx)
			g.Go(func() error { return status.Run(ctx) })
			g.Go(func() error { srv.RunDirectRecheck(ctx, directRecheck); return nil })
			g.Go(func() error { return srv.Serve(ctx, tls.NewListener(l, proxy.TLSConfig(cert))) })
			if metricsAddr != "0" && metricsAddr != "" {
				ms := &http.Server{Addr: metricsAddr, ReadHeaderTimeout: 10 * time.Second,
					Handler: promhttp.HandlerFor(crmetrics.Registry, promhttp.HandlerOpts{})}
				g.Go(func() error {
					go func() { <-ctx.Done(); _ = ms.Shutdown(context.Background()) }()
					if err := ms.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
						return err
					}
					return nil
				})
			}
			return g.Wait()
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the upstream cluster (default: in-cluster, or $KUBECONFIG)")
	f.StringVar(&namespace, "namespace", envOr("NAMESPACE", config.DefaultSystemNamespace), "system namespace (Secrets fleet-proxy-tls and fleet-proxy-peer, the public signing keys in ConfigMap "+proxy.SigningKeysConfigMap+")")
	f.StringVar(&service, "service", "fleet-proxy", "name of fleet-proxy's Service (the serving certificate's name is <service>.<namespace>.svc)")
	f.StringVar(&listen, "listen", ":8443", "address of the HTTPS server")
	f.StringVar(&certFile, "tls-cert-file", "", "serving certificate (default: Secret fleet-proxy-tls, made when missing)")
	f.StringVar(&keyFile, "tls-private-key-file", "", "serving certificate's key")
	f.StringVar(&caFile, "tls-ca-file", "", "CA that verifies the serving certificate of --tls-cert-file, for connections to the other replicas")
	f.StringVar(&podIP, "pod-ip", os.Getenv("POD_IP"), "this pod's IP (the downward API's status.podIP): the other ready endpoints of --service are its peers (empty: no peering, one replica only)")
	f.BoolVar(&setCABundle, "set-apiservice-ca-bundle", true, "with the certificate of Secret fleet-proxy-tls, write its CA into APIService "+proxy.APIServiceName)
	f.StringVar(&metricsAddr, "metrics-address", ":8080", "address of the Prometheus metrics endpoint (0 disables it)")
	f.StringVar(&replica, "replica-name", "", "name of this replica, recorded in the Connected condition of the Clusters whose tunnel it holds (default: $POD_NAME, else the host name); other replicas look for a pod of that name in --namespace")
	f.DurationVar(&directMaxLifetime, "direct-token-max-lifetime", 24*time.Hour, "longest lifetime a user may ask for a direct token (at most 24h)")
	f.DurationVar(&directUnverifiedLifetime, "direct-token-unverified-max-lifetime", proxy.DefaultDirectUnverifiedLifetime, "longest lifetime of a direct token whose caller's credential lifetime is unknown (no token or client certificate shown with the request, or one without an expiry)")
	f.IntVar(&directPerUser, "direct-tokens-per-user", proxy.DefaultDirectTokensPerUser, "live direct tokens one user may hold for one Cluster: a new one revokes the oldest")
	f.IntVar(&directIssueLimit, "direct-token-issue-limit", proxy.DefaultDirectIssueLimit, "direct tokens one user may be issued for one Cluster per --direct-token-issue-window (then 429 with Retry-After)")
	f.DurationVar(&directIssueWindow, "direct-token-issue-window", proxy.DefaultDirectIssueWindow, "the window of --direct-token-issue-limit")
	f.DurationVar(&directRecheck, "direct-recheck-interval", 10*time.Second, "how often the holders of live direct tokens are checked (clusters/proxy, their ServiceAccount and bound pod, the per-user quota); a token whose holder lost one is revoked")
	logs.addFlags(cmd)
	return cmd
}
