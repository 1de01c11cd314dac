package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gitops-fleet/fleet/internal/kubeconfig"
)

func newKubeconfigCommand() *cobra.Command {
	var req kubeconfig.Request
	var cluster, output, outputFile string
	cmd := &cobra.Command{
		Use:   "kubeconfig --cluster <workspace>/<name>",
		Short: "Print a kubeconfig that reaches a Cluster through the upstream API server's cluster proxy, as your upstream user",
		Long: `Print a kubeconfig whose server is the Cluster's proxy URL on the upstream API server
(<upstream>/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/<workspace>/clusters/<name>/proxy) and whose
user is your current upstream user, copied from your kubeconfig (read as kubectl does: --kubeconfig,
$KUBECONFIG, ~/.kube/config; --context picks the upstream context).

Files your kubeconfig refers to (CA, client certificate and key, token file) stay files, with absolute
paths: no credential is copied, and rotated ones keep working, on this machine. --flatten inlines them
instead, for a kubeconfig that works elsewhere (it then holds your credentials: keep it secret).

The Cluster must exist (an error otherwise). If you may not read it, or may not use its proxy (get on
fleet.cattle.io clusters/proxy), you are warned on stderr and the kubeconfig is still printed.

When fleet-proxy has an endpoint of its own (the chart's proxy.endpoint; ConfigMap
kube-public/fleet-proxy-endpoint says where), the context goes there instead, without the upstream API
server's hop, if your user has a bearer token (a token, a token file, an exec plugin) and does not
impersonate: the endpoint asks the upstream API server who the token is (TokenReview) and authorizes
exactly as the upstream path does, so your rights are the same. It sees your upstream token. A second
context <name>-upstream keeps the upstream path; --no-proxy-endpoint writes only that path.

When the Cluster has a direct endpoint (spec.agentDirectEndpoint), a second context <name>-direct
reaches it without the upstream: its user is a direct token fleet-proxy issues you for this Cluster
(--direct-token-ttl, default one hour), carrying the verbs of clusters/proxy you hold, so your rights
are the same on both paths. It never outlives the credential you run this with: the request shows
fleet-proxy that credential (your bearer token as it is sent, or your kubeconfig's client
certificate), whose expiry caps the token; when its expiry cannot be learned the token lives at most
fleet-proxy's --direct-token-unverified-max-lifetime (15 minutes by default). The token is a
credential: the kubeconfig then holds it.`,
		Example: `  fleet kubeconfig --cluster fleet-default/dev-1 --output-file ~/.kube/dev-1
  KUBECONFIG=~/.kube/dev-1 kubectl get pods -n payments`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "yaml", "json":
			default:
				// Until this release -o named the file to write; it is
				// the output format now, as in every other command.
				if outputFile != "" {
					return usageError("-o/--output must be yaml or json, not %q (the file is --output-file)", output)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: -o FILE is deprecated and will mean only the output format (yaml or json): write --output-file %s\n", output)
				output, outputFile = "yaml", output
			}
			ref, err := kubeconfig.ParseClusterRef(cluster)
			if err != nil {
				return fmt.Errorf("--cluster: %w", err)
			}
			req.Cluster = ref
			data, warnings, err := kubeconfig.Generate(cmd.Context(), req)
			if err != nil {
				return err
			}
			for _, w := range warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			if output == "json" {
				if data, err = yaml.YAMLToJSON(data); err != nil {
					return err
				}
				data = append(data, '\n')
			}
			if outputFile == "" {
				_, err = cmd.OutOrStdout().Write(data)
				return err
			}
			if err := kubeconfig.WriteFile(outputFile, data); err != nil {
				return fmt.Errorf("--output-file: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cluster, "cluster", "", "the Cluster, as <workspace>/<name> (required)")
	f.StringVar(&req.Kubeconfig, "kubeconfig", "", "your kubeconfig for the upstream cluster (default: $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&req.Context, "context", "", "the context of your kubeconfig to use (default: its current context)")
	f.StringVar(&req.ContextName, "context-name", "", "name of the context, cluster and user of the printed kubeconfig (default: the Cluster's name)")
	f.BoolVar(&req.Flatten, "flatten", false, "inline the files your kubeconfig refers to (CA, client certificate and key, token file)")
	f.StringVarP(&output, "output", "o", "yaml", "output format: yaml or json (a file name here is the deprecated form of --output-file)")
	f.StringVar(&outputFile, "output-file", "", "write the kubeconfig to this file (mode 0600, replaced whole) instead of standard output")
	f.DurationVar(&req.DirectTokenTTL, "direct-token-ttl", time.Hour, "lifetime of the direct context's token (a Cluster with spec.agentDirectEndpoint; at most fleet-proxy's --direct-token-max-lifetime, and no longer than your credential)")
	f.BoolVar(&req.NoDirect, "no-direct", false, "write no direct context, even when the Cluster has a direct endpoint")
	f.BoolVar(&req.NoProxyEndpoint, "no-proxy-endpoint", false, "reach the Cluster through the upstream API server even when fleet-proxy has an endpoint of its own")
	_ = cmd.MarkFlagRequired("cluster")
	return cmd
}
