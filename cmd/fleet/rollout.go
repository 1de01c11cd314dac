package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/rollout"
	"github.com/gitops-fleet/fleet/internal/kubeconfig"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// rolloutFlags reach the upstream cluster as kubectl would.
type rolloutFlags struct {
	kubeconfig, context string
}

// upstream is the caller's upstream and a client for it; its errors are
// "could not ask" (exit 2).
func (f *rolloutFlags) upstream() (*kubeconfig.Upstream, client.Client, error) {
	u, c, err := f.client("AgentRollouts")
	if err != nil {
		return nil, nil, couldNotAsk(err)
	}
	return u, c, nil
}

// client is the caller's upstream and a client for it, to read what (its
// errors explained with it).
func (f *rolloutFlags) client(what string) (*kubeconfig.Upstream, client.Client, error) {
	u, err := kubeconfig.LoadUpstream(f.kubeconfig, f.context)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(u.REST, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, nil, u.Explain(err, what)
	}
	return u, c, nil
}

// couldNotAsk: the upstream did not answer the question (exit 2, apart from
// a rollout that halted).
func couldNotAsk(err error) error { return &exitError{Code: exitUsage, Err: err} }

// rolloutNamed is the named AgentRollout, or the current one; its errors
// are "could not ask".
func rolloutNamed(ctx context.Context, u *kubeconfig.Upstream, c client.Client, args []string) (*fleet.AgentRollout, error) {
	if len(args) == 1 {
		ro := &fleet.AgentRollout{}
		if err := c.Get(ctx, client.ObjectKey{Name: args[0]}, ro); err != nil {
			return nil, couldNotAsk(u.Explain(err, "AgentRollout "+args[0]))
		}
		return ro, nil
	}
	ro, err := rollout.Latest(ctx, c)
	if errors.Is(err, rollout.ErrNoRollout) {
		return nil, couldNotAsk(err)
	}
	if err != nil {
		return nil, couldNotAsk(u.Explain(err, "AgentRollouts"))
	}
	return ro, nil
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
	var output string
	status := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Print the rollout's plan and progress",
		Long: `Print the rollout's phase, its waves and which clusters are updated, pending or failed
(-o json: the same as one JSON document, for scripts).

With --wait, wait until the rollout completes. Exit status: 0 complete (or printed, without
--wait); 1 it halted, was aborted or is still going after --wait, with the reason on stderr;
2 the command could not ask (no or wrong kubeconfig, upstream unreachable, no such
AgentRollout) or a usage error.`,
		Example: `  fleet rollout status
  fleet rollout status --wait 30m || echo "not rolled out: see the reason above"
  fleet rollout status -o json | jq .phase`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return usageError("-o/--output must be text or json, not %q", output)
			}
			u, c, err := f.upstream()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			deadline := time.Now().Add(wait)
			for {
				ro, err := rolloutNamed(ctx, u, c, args)
				if err != nil {
					return err
				}
				phase := ro.Status.Phase
				running := phase == "" || phase == fleet.RolloutProgressing || phase == fleet.RolloutPaused
				if wait == 0 || !running || time.Now().After(deadline) {
					if output == "json" {
						err = writeRolloutJSON(cmd.OutOrStdout(), ro)
					} else {
						printRollout(cmd.OutOrStdout(), ro)
					}
					if err != nil {
						return err
					}
					switch {
					case wait == 0 || phase == fleet.RolloutComplete:
						return nil
					case running:
						return &exitError{Code: exitFailed, Err: fmt.Errorf("AgentRollout %s still %s after %s", ro.Name, phaseName(phase), wait)}
					}
					return &exitError{Code: exitFailed, Err: fmt.Errorf("AgentRollout %s is %s: %s", ro.Name, phase, ro.Status.Message)}
				}
				select {
				case <-ctx.Done():
					return couldNotAsk(ctx.Err())
				case <-time.After(2 * time.Second):
				}
			}
		},
	}
	status.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the rollout to complete (exit 1 when it halts, is aborted or is still going, 2 when the upstream cannot be asked)")
	status.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")

	control := func(use, short, done string, do func(context.Context, client.Client, string) error) *cobra.Command {
		return &cobra.Command{
			Use:   use + " [NAME]",
			Short: short,
			Args:  cobra.MaximumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				u, c, err := f.upstream()
				if err != nil {
					return err
				}
				ro, err := rolloutNamed(cmd.Context(), u, c, args)
				if err != nil {
					return err
				}
				if ro.Status.Phase == fleet.RolloutComplete || ro.Status.Phase == fleet.RolloutSuperseded {
					return fmt.Errorf("AgentRollout %s is %s: there is nothing to %s", ro.Name, ro.Status.Phase, use)
				}
				if err := do(cmd.Context(), c, ro.Name); err != nil {
					return u.Explain(err, "AgentRollout "+ro.Name)
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
	phase := phaseName(st.Phase)
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
		state := waveState(st, i)
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

// phaseName is the phase as shown: an AgentRollout the controller has not
// planned yet has none.
func phaseName(phase string) string {
	if phase == "" {
		return "Planning"
	}
	return phase
}

// waveState is wave i's state: done, waiting, or the rollout's phase for
// the current wave.
func waveState(st fleet.AgentRolloutStatus, i int) string {
	phase := phaseName(st.Phase)
	switch {
	case i < int(st.Wave) || phase == fleet.RolloutComplete:
		return "done"
	case i == int(st.Wave):
		return strings.ToLower(phase)
	}
	return "waiting"
}

// rolloutJSON is `fleet rollout status -o json`: what the text shows.
type rolloutJSON struct {
	Name             string     `json:"name"`
	Revision         string     `json:"revision"`
	PreviousRevision string     `json:"previousRevision,omitempty"`
	Phase            string     `json:"phase"`
	Message          string     `json:"message,omitempty"`
	Staged           bool       `json:"staged"`
	Clusters         int32      `json:"clusters"`
	Updated          int32      `json:"updated"`
	Pending          int32      `json:"pending"`
	Failed           int32      `json:"failed"`
	FailedClusters   []string   `json:"failedClusters,omitempty"`
	RolledBack       []string   `json:"rolledBack,omitempty"`
	Waves            []waveJSON `json:"waves"`
}

type waveJSON struct {
	Canary   bool     `json:"canary,omitempty"`
	State    string   `json:"state"`
	Clusters []string `json:"clusters"`
}

func writeRolloutJSON(w io.Writer, ro *fleet.AgentRollout) error {
	st := ro.Status
	doc := rolloutJSON{
		Name: ro.Name, Revision: ro.Spec.Revision, PreviousRevision: ro.Spec.PreviousRevision,
		Phase: phaseName(st.Phase), Message: st.Message, Staged: ro.Spec.Strategy != nil,
		Clusters: st.Clusters, Updated: st.Updated, Pending: st.Pending, Failed: st.Failed,
		FailedClusters: st.FailedClusters, RolledBack: st.RolledBack, Waves: []waveJSON{},
	}
	for i, wave := range st.Waves {
		doc.Waves = append(doc.Waves, waveJSON{Canary: wave.Canary, State: waveState(st, i), Clusters: wave.Clusters})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
