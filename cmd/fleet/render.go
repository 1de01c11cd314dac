package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
	"github.com/gitops-fleet/fleet/internal/targeting"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/review"
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
		clusterFile, tokenFile, configFile, output string
		bootstrap                                  string
	)
	cmd := &cobra.Command{
		Use:   "agent (--cluster FILE | --token FILE)",
		Short: "Render a Cluster's agent, or a token's values file: the values or the manifests",
		Long: `Render the agent of a Cluster as committed in git, offline, exactly as the controller
renders it. --output values prints a values file for
  helm template fleet-agent charts/fleet-agent -n <agent namespace> -f values.yaml
which prints the same bytes as --output manifests. Credentials that cannot be
known offline (the import token) are placeholders starting with "<fleet:".

With --token, render instead the values file the controller writes for a
ClusterRegistrationToken (its values Secret, for helm install), with the
bearer token as a placeholder, or the agent it installs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "values" && output != "manifests" {
				return fmt.Errorf("--output must be values or manifests, not %q", output)
			}
			if (clusterFile == "") == (tokenFile == "") {
				return errors.New("give either --cluster or --token")
			}
			cfg := &config.Config{}
			if configFile != "" {
				var err error
				if cfg, err = readConfig(configFile); err != nil {
					return err
				}
			}
			var (
				values *renderer.AgentValues
				input  string
			)
			if tokenFile != "" {
				input = "token " + tokenFile
				tok, err := readToken(tokenFile)
				if err != nil {
					return err
				}
				if bootstrap != "auto" {
					return errors.New("--bootstrap applies to --cluster only: a token's values always install the bootstrap Secret")
				}
				values, err = renderer.AgentValuesForToken(tok, cfg, renderer.TokenPlaceholder)
				if err != nil {
					return fmt.Errorf("%s: %w", input, err)
				}
			} else {
				input = "cluster " + clusterFile
				cluster, err := readCluster(clusterFile)
				if err != nil {
					return err
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
				values, err = renderer.OfflineAgentValues(cluster, cfg, withBootstrap)
				if err != nil {
					return fmt.Errorf("%s: %w", input, err)
				}
			}
			switch output {
			case "values":
				y, err := values.YAML()
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(y)
				return err
			default:
				r, err := renderer.NewAgentRenderer()
				if err != nil {
					return err
				}
				out, err := r.Render(values)
				if err != nil {
					return fmt.Errorf("%s: %w", input, err)
				}
				_, err = cmd.OutOrStdout().Write(out.YAML)
				return err
			}
		},
	}
	cmd.Flags().StringVar(&clusterFile, "cluster", "", "Cluster YAML file")
	cmd.Flags().StringVar(&tokenFile, "token", "", "ClusterRegistrationToken YAML file: render its values file (for helm install) instead")
	cmd.Flags().StringVar(&configFile, "config", "", "controller config: the fleet-controller ConfigMap YAML, or its config document")
	cmd.Flags().StringVarP(&output, "output", "o", "manifests", "values or manifests")
	cmd.Flags().StringVar(&bootstrap, "bootstrap", "auto", "include the fleet-agent-bootstrap Secret: auto (when the Cluster has a kubeConfigSecret), true or false")
	return cmd
}

func newRenderBundleCommand() *cobra.Command {
	var (
		bundleFile, clusterFile, configFile string
		groupFiles                          []string
	)
	cmd := &cobra.Command{
		Use:   "bundle --bundle FILE [--cluster FILE [--group FILE]...] [--config FILE]",
		Short: "Render a Bundle (raw manifests, Helm chart and/or kustomize overlay) for a cluster",
		Long: `Render a Bundle as the controller renders it: in a render worker, a child process
bounded in time and memory and cut off from the network, with the same size limits
and the same refusal of kustomize overlays that name URLs or repositories. The
limits are the controller configuration's (--config) or its defaults. So a
Bundle from a pull request renders here exactly as far as it would in the
controller, and can do no more to the machine running the review.

With --cluster, the Bundle's targets are matched against that Cluster by the
controller's own rule (the first target whose clusterName, clusterSelector,
clusterGroup and clusterGroupSelector all select it): the output is what the
controller deploys to it, and nothing, with a note on stderr, when it deploys
nothing there. A target with clusterGroup or clusterGroupSelector needs the
workspace's ClusterGroups: give their YAML with --group (repeatable; a file
may hold several ClusterGroup documents). A target that needs a group that was
not given is an error, never a guess.`,
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
			var groups []fleet.ClusterGroup
			for _, f := range groupFiles {
				gs, err := readClusterGroups(f)
				if err != nil {
					return err
				}
				groups = append(groups, gs...)
			}
			if err := sameWorkspace(bundle, groups); err != nil {
				return err
			}
			cfg := &config.Config{}
			if configFile != "" {
				if cfg, err = readConfig(configFile); err != nil {
					return err
				}
			}
			opts := bundle.Spec.BundleDeploymentOptions
			if clusterFile != "" {
				cluster, err := readCluster(clusterFile)
				if err != nil {
					return err
				}
				if ns := cluster.Namespace; ns != "" && bundle.Namespace != "" && ns != bundle.Namespace {
					return fmt.Errorf("cluster %s is in workspace %s, Bundle %s in %s: a Bundle only ever deploys to the Clusters of its own workspace", cluster.Name, ns, bundle.Name, bundle.Namespace)
				}
				o, t, err := renderer.OptionsFor(bundle, cluster, targeting.Groups{Items: groups, Given: true})
				if err != nil {
					return fmt.Errorf("bundle %s: %w", bundleFile, err)
				}
				if t == nil || t.DoNotDeploy {
					fmt.Fprintln(cmd.ErrOrStderr(), targeting.Describe(bundle, cluster, t))
					return nil
				}
				opts = o
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
	cmd.Flags().StringVar(&clusterFile, "cluster", "", "Cluster YAML file: render what the controller deploys to that cluster")
	cmd.Flags().StringArrayVar(&groupFiles, "group", nil, "ClusterGroup YAML file (repeatable; several documents per file allowed): the groups clusterGroup and clusterGroupSelector targets consult")
	cmd.Flags().StringVar(&configFile, "config", "", "controller config (for its Bundle rendering limits): the fleet-controller ConfigMap YAML, or its config document")
	_ = cmd.MarkFlagRequired("bundle")
	return cmd
}

// readClusterGroups reads every document of a file as a ClusterGroup.
func readClusterGroups(path string) ([]fleet.ClusterGroup, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var groups []fleet.ClusterGroup
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if js, err := yaml.YAMLToJSON(doc); err == nil && (string(js) == "null" || len(bytes.TrimSpace(js)) == 0) {
			continue // an empty document (comments only)
		}
		g := fleet.ClusterGroup{}
		if err := strictyaml.Unmarshal(doc, &g); err != nil {
			return nil, fmt.Errorf("%s, document %d, is not a valid ClusterGroup: %w", path, i+1, err)
		}
		if g.Kind != "ClusterGroup" || !strings.HasPrefix(g.APIVersion, fleet.GroupVersion.Group+"/") {
			return nil, fmt.Errorf("%s, document %d: want kind ClusterGroup of %s, got kind %q apiVersion %q", path, i+1, fleet.GroupVersion, g.Kind, g.APIVersion)
		}
		if g.Name == "" {
			return nil, fmt.Errorf("%s, document %d: the ClusterGroup has no metadata.name", path, i+1)
		}
		groups = append(groups, g)
	}
	if len(groups) == 0 {
		return nil, fmt.Errorf("%s holds no ClusterGroup", path)
	}
	return groups, nil
}

// sameWorkspace refuses ClusterGroups of another workspace than the Bundle's
// and groups given twice: the controller consults only the groups of the
// Bundle's own workspace, where names are unique.
func sameWorkspace(bundle *fleet.Bundle, groups []fleet.ClusterGroup) error {
	seen := map[string]bool{}
	for _, g := range groups {
		if g.Namespace != "" && bundle.Namespace != "" && g.Namespace != bundle.Namespace {
			return fmt.Errorf("ClusterGroup %s is in workspace %s, Bundle %s in %s: targets only consult the groups of the Bundle's workspace", g.Name, g.Namespace, bundle.Name, bundle.Namespace)
		}
		if seen[g.Name] {
			return fmt.Errorf("ClusterGroup %s is given twice", g.Name)
		}
		seen[g.Name] = true
	}
	return nil
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

func readToken(path string) (*fleet.ClusterRegistrationToken, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t := &fleet.ClusterRegistrationToken{}
	if err := strictyaml.Unmarshal(data, t); err != nil {
		return nil, fmt.Errorf("%s is not a valid ClusterRegistrationToken: %w", path, err)
	}
	if t.Kind != "ClusterRegistrationToken" || !strings.HasPrefix(t.APIVersion, fleet.GroupVersion.Group+"/") {
		return nil, fmt.Errorf("%s: want kind ClusterRegistrationToken of %s, got kind %q apiVersion %q", path, fleet.GroupVersion, t.Kind, t.APIVersion)
	}
	if t.Name == "" {
		return nil, fmt.Errorf("%s: the ClusterRegistrationToken has no metadata.name", path)
	}
	if t.Namespace == "" {
		t.Namespace = "fleet-default"
	}
	return t, nil
}

// readConfig reads the controller config from a fleet-controller ConfigMap
// file or from a bare config document.
func readConfig(path string) (*config.Config, error) {
	cfg, err := review.ReadConfig(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
