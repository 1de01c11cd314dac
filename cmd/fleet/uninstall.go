package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/kubeconfig"
	"github.com/gitops-fleet/fleet/internal/scheme"
	"github.com/gitops-fleet/fleet/internal/uninstall"
)

// uninstallFlags reach a cluster as kubectl would.
type uninstallFlags struct {
	kubeconfig, context, namespace string
	dryRun                         bool
	timeout                        time.Duration
}

func (f *uninstallFlags) bind(cmd *cobra.Command, which string) {
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "your kubeconfig for the "+which+" cluster (default: $KUBECONFIG, then ~/.kube/config)")
	fl.StringVar(&f.context, "context", "", "the context of your kubeconfig to use (default: its current context)")
	fl.StringVarP(&f.namespace, "namespace", "n", config.DefaultSystemNamespace, "the namespace fleet was installed in")
	fl.BoolVar(&f.dryRun, "dry-run", false, "list what would be deleted and change nothing")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Minute, "how long to wait for each step (objects, CRDs, namespaces to be gone)")
}

func (f *uninstallFlags) client(which string) (client.Client, error) {
	if which == "upstream" {
		// The same words for a missing or wrong upstream as every command
		// that talks to it.
		up, err := kubeconfig.LoadUpstream(f.kubeconfig, f.context)
		if err != nil {
			return nil, err
		}
		return client.New(up.REST, client.Options{Scheme: scheme.Scheme})
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading your kubeconfig for the %s cluster: %w", which, err)
	}
	return client.New(cfg, client.Options{Scheme: scheme.Scheme})
}

func newUninstallCommand() *cobra.Command {
	var f uninstallFlags
	var keepCRDs bool
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove fleet from the upstream cluster, in an order that leaves nothing stuck",
		Long: `Remove fleet from the upstream (management) cluster your kubeconfig points at:

  1. turn off the local cluster and Cluster API auto-registration, delete the
     ClusterRegistrationTokens (no cluster registers again);
  2. delete the Clusters while the controller still runs: it removes the agents it
     pushed (manager-initiated clusters, the local cluster) and what it made for each;
  3. delete the Bundles, BundleDeployments, ClusterGroups, ClusterRegistrations and
     AgentRollouts;
  4. delete the controller, fleet-proxy, the renderer, their RBAC, the APIService and
     the admission policies (what helm uninstall removes, for a helm or a kustomize
     install alike);
  5. delete the CRDs (not with --keep-crds);
  6. delete fleet's namespaces: the controller's (with the helm release's records),
     cattle-fleet-clusters-system, the cluster-* namespaces, the local cluster's
     fleet-local when fleet made it.

Each step waits (--timeout) until what it deleted is gone. It refuses before changing
anything when you lack a right it needs, or when the controller is not running
while objects carry its finalizers.

Your own namespaces (workspaces such as fleet-default) and what you put in them (the
kubeconfig Secrets of your Clusters) stay. Stop a GitOps tool that applies fleet
objects first, or it makes them again. What your Bundles deployed downstream is not
removed by the uninstall (see docs/operations.md "Uninstall").

At the end it names the downstream clusters that may still run an agent (agent-initiated
ones, and those the controller could not reach): run "fleet uninstall agent" there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client("upstream")
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			res, err := (&uninstall.Upstream{
				Client: c, Namespace: f.namespace, KeepCRDs: keepCRDs, DryRun: f.dryRun, Timeout: f.timeout, Out: out,
			}).Run(cmd.Context())
			if err != nil {
				return err
			}
			if len(res.Agents) > 0 {
				fmt.Fprintf(out, "\n%d downstream clusters may still run an agent:\n", len(res.Agents))
				for _, a := range res.Agents {
					fmt.Fprintf(out, "  %s\n", a)
				}
			}
			return nil
		},
	}
	f.bind(cmd, "upstream")
	cmd.Flags().BoolVar(&keepCRDs, "keep-crds", false, "leave the CustomResourceDefinitions (every object of theirs is deleted)")

	var af uninstallFlags
	agent := &cobra.Command{
		Use:   "agent",
		Short: "Remove a fleet agent from a downstream cluster",
		Long: `Remove a fleet agent from the downstream cluster your kubeconfig points at: what the
agent chart or the controller's push made (labelled app.kubernetes.io/part-of=fleet),
and what the agent made at runtime that helm uninstall leaves: its identity Secret
fleet-agent-identity (with its recovery token), its credential, its inventories, its
direct endpoint's certificate and state, the impersonators of cluster access and their
namespace cattle-impersonation-system; then its namespace when it is
cattle-fleet-system or fleet made it.

Run it after "fleet uninstall" upstream (an agent whose Cluster still exists may be
pushed again). What your Bundles deployed stays. It refuses in a cluster where the
fleet controller runs: "fleet uninstall" removes the local agent there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := af.client("downstream")
			if err != nil {
				return err
			}
			return (&uninstall.Agent{Client: c, Namespace: af.namespace, DryRun: af.dryRun, Timeout: af.timeout, Out: cmd.OutOrStdout()}).Run(cmd.Context())
		},
	}
	af.bind(agent, "downstream")
	cmd.AddCommand(agent)
	return cmd
}
