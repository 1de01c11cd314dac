package main

import (
	"fmt"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/renderservice"
)

func newRendererCommand() *cobra.Command {
	opts := renderservice.ServerOptions{}
	var logs logOptions
	cmd := &cobra.Command{
		Use:   "renderer",
		Short: "Serve Bundle renders to the controller, apart from it (Deployment fleet-renderer)",
		Long: `Render Bundles (Helm charts, kustomize overlays) for the controller in
render workers, child processes bounded in time, memory and number, without
network. The controller sends each render over TLS with a bearer token; the
renderer holds only the token's hash, its serving certificate and key (the
files of Secret fleet-renderer-tls in --credentials-dir), and no Kubernetes
credential: it refuses to start when a ServiceAccount token is mounted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.setup()
			if err != nil {
				return err
			}
			logStart(log, "renderer")
			return renderservice.Serve(logr.NewContext(cmd.Context(), log), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Listen, "listen", ":8443", "TLS address to serve renders on")
	f.StringVar(&opts.CredentialsDir, "credentials-dir", "/etc/fleet-renderer", "directory holding "+renderservice.KeyCert+", "+renderservice.KeyKey+" and "+renderservice.KeyTokenHash+" (Secret "+renderservice.SecretName+"); read again when they change")
	f.IntVar(&opts.Concurrency, "concurrency", config.DefaultBundleRenderConcurrency, "render workers of this renderer at once, at most (size the pod's memory limit for it: concurrency x bundleRenderMemoryLimit)")
	f.Var(&quantityFlag{v: &opts.BundleMaxSize}, "bundle-max-size", "the controller's bundleMaxSize (a quantity, 32Mi by default): the largest render request follows it")
	f.BoolVar(&opts.AllowKubernetesCredential, "allow-kubernetes-credential", false, "start even with a ServiceAccount token mounted (development only: a Bundle author who escapes a worker would hold it)")
	logs.addFlags(cmd)
	return cmd
}

// quantityFlag is a flag of a Kubernetes quantity ("32Mi"), in bytes.
type quantityFlag struct{ v *int64 }

func (q *quantityFlag) String() string {
	if q.v == nil || *q.v == 0 {
		return ""
	}
	return resource.NewQuantity(*q.v, resource.BinarySI).String()
}

func (q *quantityFlag) Set(s string) error {
	v, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("not a quantity (32Mi, 64Mi): %w", err)
	}
	if v.Sign() <= 0 {
		return fmt.Errorf("must be positive, not %s", s)
	}
	*q.v = v.Value()
	return nil
}

func (q *quantityFlag) Type() string { return "quantity" }
