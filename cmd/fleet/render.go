package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/spf13/cobra"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	bundlectrl "github.com/gitops-fleet/fleet/controller/bundle"
	"github.com/gitops-fleet/fleet/internal/bundleoptions"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
	"github.com/gitops-fleet/fleet/internal/suggest"
	"github.com/gitops-fleet/fleet/internal/targeting"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
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
				return usageError("-o/--output must be values (the values file, YAML) or manifests (the agent's manifests, YAML), not %q", output)
			}
			if (clusterFile == "") == (tokenFile == "") {
				return usageError("give either --cluster FILE or --token FILE")
			}
			cfg := &config.Config{}
			if configFile != "" {
				var err error
				if cfg, err = readConfig(configFile); err != nil {
					return err
				}
			}
			var (
				values *agentvalues.Values
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
				if cfg.APIServerURL == "" {
					return fmt.Errorf("%s: no upstream API server URL for the agent: %s", input, noAPIServerURL(configFile))
				}
				values, err = agentvalues.ForToken(tok, cfg, agentvalues.TokenPlaceholder)
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
				values, err = agentvalues.Offline(cluster, cfg, withBootstrap)
				if errors.Is(err, agentvalues.ErrNoAPIServerURL) && configFile == "" {
					return fmt.Errorf("%s: no upstream API server URL for the agent: %s", input, noAPIServerURL(configFile))
				}
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
	cmd.Flags().StringVarP(&output, "output", "o", "manifests", "output format: values (the values file for helm template) or manifests")
	cmd.Flags().StringVar(&bootstrap, "bootstrap", "auto", "include the fleet-agent-bootstrap Secret: auto (when the Cluster has a kubeConfigSecret), true or false")
	return cmd
}

func newRenderBundleCommand() *cobra.Command {
	var (
		bundleFile, clusterFile, configFile, output string
		groupFiles                                  []string
		upstream                                    rolloutFlags
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
not given is an error, never a guess.

The cluster's ${ } values templates (helm.values, helm.templateValues) and
global.fleet.clusterLabels.<key> values are rendered with that Cluster, as the
controller renders them. helm.valuesFrom ConfigMaps and Secrets are read from
the upstream cluster, as the controller reads them: a Bundle with valuesFrom
needs --kubeconfig or --context (and the right to read them there).

A Bundle with spec.contentsId (resources too large for one object, written by
fleet apply as contents Secrets) is rendered from the contents Secrets in the
same file (fleet apply -o writes them before the Bundle), or else read from
the upstream cluster with --kubeconfig or --context; they are checked as the
controller checks them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "yaml" && output != "json" {
				return usageError("-o/--output must be yaml or json, not %q", output)
			}
			bundle := &fleet.Bundle{}
			if err := readObject(bundleFile, "Bundle", bundle); err != nil {
				return err
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
			if err := bundleoptions.Check(&bundle.Spec); err != nil {
				return fmt.Errorf("bundle %s is not deployed (%s): %w", bundleFile, fleet.UnsupportedOptionReason, err)
			}
			bundle, err := bundleWithValues(cmd.Context(), upstream, bundleFile, bundle)
			if err != nil {
				return err
			}
			cfg := &config.Config{}
			if configFile != "" {
				var err error
				if cfg, err = readConfig(configFile); err != nil {
					return err
				}
			}
			opts := bundle.Spec.BundleDeploymentOptions
			values := &renderer.ClusterValues{}
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
					return fmt.Errorf("bundle %s: %w%s", bundleFile, err, groupsGiven(err, groups))
				}
				if t == nil || t.DoNotDeploy {
					fmt.Fprintln(cmd.ErrOrStderr(), targeting.Describe(bundle, cluster, t))
					return nil
				}
				opts = o
				values.Cluster = renderer.ContextOf(cluster)
			}
			if values.ValuesFrom, err = readValuesFrom(cmd.Context(), upstream, bundle, opts); err != nil {
				return fmt.Errorf("bundle %s: %w", bundleFile, err)
			}
			pool, err := renderworker.NewPool(func() renderworker.Limits { return renderworker.LimitsOf(cfg) })
			if err != nil {
				return err
			}
			resources, err := bundleResources(cmd.Context(), upstream, bundleFile, bundle)
			if err != nil {
				return err
			}
			out, err := pool.RenderFor(cmd.Context(), bundle.Name, resources, opts, values)
			if re := (*renderworker.RenderError)(nil); errors.As(err, &re) {
				return fmt.Errorf("bundle %s: %s (%s)", bundleFile, re.Message, re.Reason)
			}
			if err != nil {
				return fmt.Errorf("bundle %s: %w", bundleFile, err)
			}
			if output == "json" {
				return writeJSONList(cmd.OutOrStdout(), out.YAML)
			}
			_, err = cmd.OutOrStdout().Write(out.YAML)
			return err
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "output format of the manifests: yaml (documents) or json (a v1 List)")
	cmd.Flags().StringVar(&bundleFile, "bundle", "", "Bundle YAML file (required)")
	cmd.Flags().StringVar(&clusterFile, "cluster", "", "Cluster YAML file: render what the controller deploys to that cluster")
	cmd.Flags().StringArrayVar(&groupFiles, "group", nil, "ClusterGroup YAML file (repeatable; several documents per file allowed): the groups clusterGroup and clusterGroupSelector targets consult")
	cmd.Flags().StringVar(&configFile, "config", "", "controller config (for its Bundle rendering limits): the fleet-controller ConfigMap YAML, or its config document")
	cmd.Flags().StringVar(&upstream.kubeconfig, "kubeconfig", "", "kubeconfig of the upstream cluster to read helm.valuesFrom ConfigMaps and Secrets from (default: $KUBECONFIG, ~/.kube/config when --context is given)")
	cmd.Flags().StringVar(&upstream.context, "context", "", "context of the kubeconfig to read helm.valuesFrom from")
	_ = cmd.MarkFlagRequired("bundle")
	return cmd
}

// readValuesFrom reads the Bundle's helm.valuesFrom sources from the
// upstream, as the controller does; without --kubeconfig or --context a
// Bundle that has some is an error saying so.
func readValuesFrom(ctx context.Context, f rolloutFlags, bundle *fleet.Bundle, opts fleet.BundleDeploymentOptions) ([]renderer.ValuesSource, error) {
	ns := bundle.Namespace
	if ns == "" {
		ns = "default"
	}
	refs := renderer.ValuesFromRefs(opts.Helm, ns)
	if len(refs) == 0 {
		return nil, nil
	}
	if f.kubeconfig == "" && f.context == "" {
		return nil, usageError("helm.valuesFrom reads %s %s/%s from the upstream cluster, as the controller does: give --kubeconfig or --context to read it there", refs[0].Kind, refs[0].Namespace, refs[0].Name)
	}
	u, c, err := f.client("valuesFrom ConfigMaps and Secrets")
	if err != nil {
		return nil, err
	}
	var out []renderer.ValuesSource
	for _, ref := range refs {
		src, fail, err := bundlectrl.ReadValuesSource(ctx, c, ns, ref)
		if err != nil {
			return nil, u.Explain(err, ref.Kind+"s")
		}
		if fail != nil {
			return nil, fmt.Errorf("%s (%s)", fail.Message, fail.Reason)
		}
		out = append(out, src)
	}
	return out, nil
}

// readClusterGroups reads every document of a file as a ClusterGroup.
func readClusterGroups(path string) ([]fleet.ClusterGroup, error) {
	docs, err := readDocuments(path)
	if err != nil {
		return nil, err
	}
	var groups []fleet.ClusterGroup
	for _, d := range docs {
		if !d.isFleet("ClusterGroup") {
			return nil, fmt.Errorf("%s: document %d is %s, not a ClusterGroup of %s", path, d.index, d.describe("ClusterGroup"), fleet.GroupVersion)
		}
		g := fleet.ClusterGroup{}
		if err := strictyaml.Unmarshal(d.data, &g); err != nil {
			return nil, fmt.Errorf("%s, document %d (%s): %w", path, d.index, d.name(), err)
		}
		if g.Name == "" {
			return nil, fmt.Errorf("%s, document %d: the ClusterGroup has no metadata.name", path, d.index)
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

// readCluster reads the Cluster of a file (among other documents, such as
// its kubeconfig Secret, in any order).
func readCluster(path string) (*fleet.Cluster, error) {
	c := &fleet.Cluster{}
	if err := readObject(path, "Cluster", c); err != nil {
		return nil, err
	}
	if c.Name == "" {
		return nil, fmt.Errorf("%s: the Cluster has no metadata.name", path)
	}
	return c, nil
}

func readToken(path string) (*fleet.ClusterRegistrationToken, error) {
	t := &fleet.ClusterRegistrationToken{}
	if err := readObject(path, "ClusterRegistrationToken", t); err != nil {
		return nil, err
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
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return nil, fmt.Errorf("--config: %w", err) // it names the file
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// noAPIServerURL says where the upstream URL the agent needs comes from.
func noAPIServerURL(configFile string) string {
	if configFile == "" {
		return "give the controller configuration with --config FILE: your installation's (kubectl -n cattle-fleet-system get configmap fleet-controller -o yaml > fleet-controller.yaml), or examples/gitops/config/fleet-controller.yaml as an example"
	}
	return configFile + " sets no apiServerURL: set it there (the fleet chart's value apiServerURL)"
}

// groupsGiven adds, to a target that needs a ClusterGroup that was not
// given, the groups that were given and the one it was likely meant to be.
func groupsGiven(err error, groups []fleet.ClusterGroup) string {
	var missing *targeting.MissingGroupsError
	if !errors.As(err, &missing) || missing.Group == "" || len(groups) == 0 {
		return ""
	}
	var names []string
	for _, g := range groups {
		names = append(names, g.Name)
	}
	msg := "; the ClusterGroups given are " + strings.Join(names, ", ")
	if s := suggest.Nearest(missing.Group, names); s != "" {
		msg += fmt.Sprintf(": is clusterGroup %q (spec.targets[%d]) a typo of %q?", missing.Group, missing.Target, s)
	}
	return msg
}

// writeJSONList writes YAML manifests as one v1 List, as kubectl get -o json
// prints several objects.
func writeJSONList(w io.Writer, manifests []byte) error {
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{}}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return err
		}
		if obj != nil {
			list["items"] = append(list["items"].([]any), obj)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(list)
}
