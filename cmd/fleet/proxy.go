package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/proxy"
)

func newProxyCommand() *cobra.Command {
	var kubeconfig string
	var o proxy.Options
	var logs logOptions
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run fleet-proxy, the aggregated API server proxy.fleet.cattle.io that serves users' requests to registered clusters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := logs.setup(); err != nil {
				return err
			}
			logStart(ctrl.Log, "proxy")
			if kubeconfig != "" {
				_ = os.Setenv("KUBECONFIG", kubeconfig)
			}
			var err error
			if o.Config, err = ctrl.GetConfig(); err != nil {
				return fmt.Errorf("finding the upstream cluster: %w", err)
			}
			o.Log = ctrl.Log
			p, err := proxy.New(o)
			if err != nil {
				return err
			}
			return p.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the upstream cluster (default: in-cluster, or $KUBECONFIG)")
	f.StringVar(&o.Namespace, "namespace", envOr("NAMESPACE", config.DefaultSystemNamespace), "system namespace (Secrets fleet-proxy-tls and fleet-proxy-peer, the public signing keys in ConfigMap "+proxy.SigningKeysConfigMap+")")
	f.StringVar(&o.Service, "service", "fleet-proxy", "name of fleet-proxy's Service (the serving certificate's name is <service>.<namespace>.svc)")
	f.StringVar(&o.Listen, "listen", ":8443", "address of the HTTPS server")
	f.StringVar(&o.CertFile, "tls-cert-file", "", "serving certificate (default: Secret fleet-proxy-tls, made when missing)")
	f.StringVar(&o.KeyFile, "tls-private-key-file", "", "serving certificate's key")
	f.StringVar(&o.CAFile, "tls-ca-file", "", "CA that verifies the serving certificate of --tls-cert-file, for connections to the other replicas")
	f.StringVar(&o.EndpointListen, "endpoint-listen", "", "address of fleet-proxy's endpoint: the clusters' proxy served without the upstream API server, to bearer tokens the upstream API server accepts (TokenReview), authorized as through it; it sees users' upstream tokens (empty: no endpoint)")
	f.StringVar(&o.EndpointCertFile, "endpoint-tls-cert-file", "", "the endpoint's serving certificate, for the host users reach it at (default: the serving certificate)")
	f.StringVar(&o.EndpointKeyFile, "endpoint-tls-private-key-file", "", "the endpoint's serving certificate's key")
	f.StringVar(&o.EndpointCAFile, "endpoint-tls-ca-file", "", "CA that verifies --endpoint-tls-cert-file, published for clients")
	f.BoolVar(&o.PublishEndpointCA, "publish-endpoint-ca", true, "with --endpoint-listen, write the CA of the endpoint's certificate into ConfigMap "+proxyv1.EndpointConfigMapNamespace+"/"+proxyv1.EndpointConfigMap+" (the chart makes it with the URL), where `fleet kubeconfig` finds it")
	f.StringVar(&o.PodIP, "pod-ip", os.Getenv("POD_IP"), "this pod's IP (the downward API's status.podIP): the other ready endpoints of --service are its peers (empty: no peering, one replica only)")
	f.BoolVar(&o.SetAPIServiceCABundle, "set-apiservice-ca-bundle", true, "with the certificate of Secret fleet-proxy-tls, write its CA into APIService "+proxy.APIServiceName)
	f.StringVar(&o.MetricsAddress, "metrics-address", ":8080", "address of the Prometheus metrics endpoint (0 disables it)")
	f.StringVar(&o.Replica, "replica-name", "", "name of this replica, recorded in the Connected condition of the Clusters whose tunnel it holds (default: $POD_NAME, else the host name); other replicas look for a pod of that name in --namespace")
	f.DurationVar(&o.DirectTokenMaxLifetime, "direct-token-max-lifetime", 24*time.Hour, "longest lifetime a user may ask for a direct token (at most 24h)")
	f.DurationVar(&o.DirectTokenUnverifiedMaxLifetime, "direct-token-unverified-max-lifetime", proxy.DefaultDirectUnverifiedLifetime, "longest lifetime of a direct token whose caller's credential lifetime is unknown (no token or client certificate shown with the request, or one without an expiry)")
	f.IntVar(&o.DirectTokensPerUser, "direct-tokens-per-user", proxy.DefaultDirectTokensPerUser, "live direct tokens one user may hold for one Cluster: a new one revokes the oldest")
	f.IntVar(&o.DirectTokenIssueLimit, "direct-token-issue-limit", proxy.DefaultDirectIssueLimit, "direct tokens one user may be issued for one Cluster per --direct-token-issue-window (then 429 with Retry-After)")
	f.DurationVar(&o.DirectTokenIssueWindow, "direct-token-issue-window", proxy.DefaultDirectIssueWindow, "the window of --direct-token-issue-limit")
	f.DurationVar(&o.DirectRecheckInterval, "direct-recheck-interval", 10*time.Second, "how often the holders of live direct tokens are checked (clusters/proxy, their ServiceAccount and bound pod, the per-user quota); a token whose holder lost one is revoked")
	logs.addFlags(cmd)
	return cmd
}
