package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
	"github.com/gitops-fleet/fleet/renderer"
)

func newRenderCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Render offline what the controller would apply (for review in pull requests)",
	}
	cmd.AddCommand(newRenderAgentCommand(), newRenderBundleCommand())
	return cmd
}

func newRenderAgentCommand() *cobra.Command {
	var (
		clusterFile, configFile, output string
		bootstrap                       string
	)
	cmd := &cobra.Command{
		Use:   "agent --cluster FILE",
		Short: "Render a Cluster's agent: the values file or the manifests",
		Long: `Render the agent of a Cluster as committed in git, offline, exactly as the controller
renders it. --output values prints a values file for
  helm template fleet-agent charts/fleet-agent -n <agent namespace> -f values.yaml
which prints the same bytes as --output manifests. Credentials that cannot be
known offline (the import token) are placeholders starting with "<fleet:".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "values" && output != "manifests" {
				return fmt.Errorf("--output must be values or manifests, not %q", output)
			}
			cluster, err := readCluster(clusterFile)
			if err != nil {
				return err
			}
			cfg := &config.Config{}
			if configFile != "" {
				if cfg, err = readConfig(configFile); err != nil {
					return err
				}
			}
			withBootstrap := cluster.Spec.KubeConfigSecret != ""
			switch bootstrap {
			case "auto":
			case "true":
				withBootstrap = true
			case "false":
				withBootstrap = false
			default:
				return fmt.Errorf("--bootstrap must be auto, true or false, not %q", bootstrap)
			}
			values, err := renderer.OfflineAgentValues(cluster, cfg, withBootstrap)
			if err != nil {
				return fmt.Errorf("cluster %s: %w", clusterFile, err)
			}
			switch output {
			case "values":
				y, err := values.YAML()
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(y)
				return err
			case "manifests":
				r, err := renderer.NewAgentRenderer()
				if err != nil {
					return err
				}
				out, err := r.Render(values)
				if err != nil {
					return fmt.Errorf("cluster %s: %w", clusterFile, err)
				}
				_, err = cmd.OutOrStdout().Write(out.YAML)
				return err
			default:
				return fmt.Errorf("--output must be values or manifests, not %q", output)
			}
		},
	}
	cmd.Flags().StringVar(&clusterFile, "cluster", "", "Cluster YAML file (required)")
	cmd.Flags().StringVar(&configFile, "config", "", "controller config: the fleet-controller ConfigMap YAML, or its config document")
	cmd.Flags().StringVarP(&output, "output", "o", "manifests", "values or manifests")
	cmd.Flags().StringVar(&bootstrap, "bootstrap", "auto", "include the fleet-agent-bootstrap Secret: auto (when the Cluster has a kubeConfigSecret), true or false")
	_ = cmd.MarkFlagRequired("cluster")
	return cmd
}

func newRenderBundleCommand() *cobra.Command {
	var bundleFile, clusterFile, configFile string
	cmd := &cobra.Command{
		Use:   "bundle --bundle FILE [--cluster FILE] [--config FILE]",
		Short: "Render a Bundle (raw manifests, Helm chart and/or kustomize overlay) for a cluster",
		Long: `Render a Bundle as the controller renders it: in a render worker, a child process
bounded in time and memory and cut off from the network, with the same size limits
and the same refusal of kustomize overlays that name URLs or repositories. The
limits are the controller configuration's (--config) or its defaults. So a
Bundle from a pull request renders here exactly as far as it would in the
controller, and can do no more to the machine running the review.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := os.ReadFile(bundleFile)
			if err != nil {
				return err
			}
			bundle := &fleet.Bundle{}
			if err := strictyaml.Unmarshal(data, bundle); err != nil {
				return fmt.Errorf("%s is not a valid Bundle: %w", bundleFile, err)
			}
			if bundle.Kind != "Bundle" {
				return fmt.Errorf("%s: kind is %q, want Bundle", bundleFile, bundle.Kind)
			}
			var cluster *fleet.Cluster
			if clusterFile != "" {
				if cluster, err = readCluster(clusterFile); err != nil {
					return err
				}
			}
			cfg := &config.Config{}
			if configFile != "" {
				if cfg, err = readConfig(configFile); err != nil {
					return err
				}
			}
			opts, err := renderer.OptionsFor(bundle, cluster)
			if err != nil {
				return fmt.Errorf("bundle %s: %w", bundleFile, err)
			}
			pool, err := renderworker.NewPool(func() renderworker.Limits { return renderworker.LimitsOf(cfg) })
			if err != nil {
				return err
			}
			out, err := pool.Render(cmd.Context(), bundle.Name, bundle.Spec.Resources, opts)
			if re := (*renderworker.RenderError)(nil); errors.As(err, &re) {
				return fmt.Errorf("bundle %s: %s (%s)", bundleFile, re.Message, re.Reason)
			}
			if err != nil {
				return fmt.Errorf("bundle %s: %w", bundleFile, err)
			}
			_, err = cmd.OutOrStdout().Write(out.YAML)
			return err
		},
	}
	cmd.Flags().StringVar(&bundleFile, "bundle", "", "Bundle YAML file (required)")
	cmd.Flags().StringVar(&clusterFile, "cluster", "", "Cluster YAML file: apply that cluster's target customisation")
	cmd.Flags().StringVar(&configFile, "config", "", "controller config (for its Bundle rendering limits): the fleet-controller ConfigMap YAML, or its config document")
	_ = cmd.MarkFlagRequired("bundle")
	return cmd
}

func readCluster(path string) (*fleet.Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := &fleet.Cluster{}
	if err := strictyaml.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("%s is not a valid Cluster: %w", path, err)
	}
	if c.Kind != "Cluster" || !strings.HasPrefix(c.APIVersion, fleet.GroupVersion.Group+"/") {
		return nil, fmt.Errorf("%s: want kind Cluster of %s, got kind %q apiVersion %q", path, fleet.GroupVersion, c.Kind, c.APIVersion)
	}
	if c.Name == "" {
		return nil, fmt.Errorf("%s: the Cluster has no metadata.name", path)
	}
	return c, nil
}

// readConfig reads the controller config from a fleet-controller ConfigMap
// file or from a bare config document.
func readConfig(path string) (*config.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var meta struct {
		Kind string `json:"kind"`
	}
	_ = yaml.Unmarshal(data, &meta)
	if meta.Kind == "ConfigMap" {
		cm := &corev1.ConfigMap{}
		if err := yaml.Unmarshal(data, cm); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return config.FromConfigMap(cm)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
