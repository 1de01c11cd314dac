package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/rollout"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// rolloutFlags reach the upstream cluster as kubectl would.
type rolloutFlags struct {
	kubeconfig, context string
}

func (f *rolloutFlags) client() (client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading your kubeconfig for the upstream cluster: %w", err)
	}
	return client.New(cfg, client.Options{Scheme: scheme.Scheme})
}

// rolloutNamed is the named AgentRollout, or the current one.
func rolloutNamed(ctx context.Context, c client.Client, args []string) (*fleet.AgentRollout, error) {
	if len(args) == 1 {
		ro := &fleet.AgentRollout{}
		if err := c.Get(ctx, client.ObjectKey{Name: args[0]}, ro); err != nil {
			return nil, fmt.Errorf("AgentRollout %s: %w", args[0], err)
		}
		return ro, nil
	}
	return rollout.Latest(ctx, c)
}

func newRolloutCommand() *cobra.Command {
	var f rolloutFlags
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Show and steer the staged rollout of a change that rolls every agent",
		Long: `A change that rolls every agent (a controller upgrade that ships a changed agent chart,
an agent setting in the controller configuration) is a new agent revision, with an
AgentRollout that records it and how far it got. With agentRollout set in the
controller configuration, the agents take it in waves (a canary, then maxUnavailable
at a time); see docs/operations.md, "Staged agent rollouts".

Without a NAME, the commands act on the current revision's AgentRollout.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.kubeconfig, "kubeconfig", "", "your kubeconfig for the upstream cluster (default: $KUBECONFIG, then ~/.kube/config)")
	pf.StringVar(&f.context, "context", "", "the context of your kubeconfig to use (default: its current context)")

	var wait time.Duration
	status := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Print the rollout's plan and progress",
		Long: `Print the rollout's phase, its waves and which clusters are updated, pending or failed.
With --wait, wait until it completes (exit 0) or halts or is aborted (exit 1).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			deadline := time.Now().Add(wait)
			for {
				ro, err := rolloutNamed(ctx, c, args)
				if err != nil {
					return err
				}
				phase := ro.Status.Phase
				running := phase == "" || phase == fleet.RolloutProgressing || phase == fleet.RolloutPaused
				if wait == 0 || !running || time.Now().After(deadline) {
					printRollout(cmd.OutOrStdout(), ro)
					switch {
					case wait == 0 || phase == fleet.RolloutComplete:
						return nil
					case running:
						return &exitError{Code: 1, Err: fmt.Errorf("AgentRollout %s still %s after %s", ro.Name, phase, wait)}
					}
					return &exitError{Code: 1, Err: fmt.Errorf("AgentRollout %s is %s: %s", ro.Name, phase, ro.Status.Message)}
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(2 * time.Second):
				}
			}
		},
	}
	status.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the rollout to complete (exit 1 when it halts, is aborted or is still going)")

	control := func(use, short, done string, do func(context.Context, client.Client, string) error) *cobra.Command {
		return &cobra.Command{
			Use:   use + " [NAME]",
			Short: short,
			Args:  cobra.MaximumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := f.client()
				if err != nil {
					return err
				}
				ro, err := rolloutNamed(cmd.Context(), c, args)
				if err != nil {
					return err
				}
				if ro.Status.Phase == fleet.RolloutComplete || ro.Status.Phase == fleet.RolloutSuperseded {
					return fmt.Errorf("AgentRollout %s is %s: there is nothing to %s", ro.Name, ro.Status.Phase, use)
				}
				if err := do(cmd.Context(), c, ro.Name); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "AgentRollout %s %s\n", ro.Name, done)
				return nil
			},
		}
	}
	cmd.AddCommand(status,
		control("pause", "Admit no further wave (the admitted ones carry on)", "paused: no further wave is admitted until `fleet rollout resume`", rollout.Pause),
		control("resume", "Lift a pause, or retry a halted wave with a new deadline", "resumed", rollout.Resume),
		control("abort", "End the rollout: every cluster it updated goes back to the previous revision", "aborted: the clusters it updated go back to the previous revision", rollout.Abort),
	)
	return cmd
}

// printRollout writes the rollout as `fleet rollout status` shows it.
func printRollout(w io.Writer, ro *fleet.AgentRollout) {
	st := ro.Status
	fmt.Fprintf(w, "AgentRollout %s: revision %.12s", ro.Name, ro.Spec.Revision)
	if ro.Spec.PreviousRevision != "" {
		fmt.Fprintf(w, " (previous %.12s)", ro.Spec.PreviousRevision)
	}
	fmt.Fprintln(w)
	phase := st.Phase
	if phase == "" {
		phase = "Planning"
	}
	fmt.Fprintf(w, "Phase:    %s\n", phase)
	if st.Message != "" {
		fmt.Fprintf(w, "Message:  %s\n", st.Message)
	}
	if ro.Spec.Strategy == nil {
		fmt.Fprintln(w, "Strategy: all at once (agentRollout is not set)")
	}
	fmt.Fprintf(w, "Clusters: %d planned, %d updated, %d pending, %d failed\n", st.Clusters, st.Updated, st.Pending, st.Failed)
	if len(st.RolledBack) > 0 {
		fmt.Fprintf(w, "Rolled back: %s\n", strings.Join(st.RolledBack, ", "))
	}
	for i, wave := range st.Waves {
		state := "waiting"
		switch {
		case i < int(st.Wave) || phase == fleet.RolloutComplete:
			state = "done"
		case i == int(st.Wave):
			state = strings.ToLower(phase)
		}
		name := fmt.Sprintf("wave %d", i+1)
		if wave.Canary {
			name += " (canary)"
		}
		fmt.Fprintf(w, "  %-16s %-12s %d clusters: %s\n", name, state, len(wave.Clusters), sampleKeys(wave.Clusters, 6))
	}
}

func sampleKeys(keys []string, n int) string {
	if len(keys) <= n {
		return strings.Join(keys, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(keys[:n], ", "), len(keys)-n)
}
