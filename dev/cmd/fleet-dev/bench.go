package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"

	"github.com/gitops-fleet/fleet/dev/bench"
)

func newBenchCommand() *cobra.Command {
	opts := bench.Options{}
	var jsonFile, baselineFile, recordFile, recordNote string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure registration latency, scale and steady-state cost, and cluster access through fleet-proxy, on local control planes",
		Long: `Start an upstream and downstream control planes (bin/ must hold kube-apiserver,
etcd and kube-controller-manager: make controlplane-bins), run this binary's
controller as a separate process and agents in-process, and measure:
render, agent-initiated, manager-initiated, scale, steady-state and
bundle-rollout. Then, on their own control planes with this binary's
fleet-proxy as a separate process and agents' tunnels in-process, cluster
access: a GET and a watch event direct vs. through fleet-proxy, concurrent
clients through one tunnel, and fleet-proxy's memory and CPU with many idle
tunnels. Prints a table and, with --json, writes the results.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// remotedialer logs through logrus, at info every tunnel's end:
			// a thousand lines when the idle tunnels stop.
			logrus.SetLevel(logrus.WarnLevel)
			self, err := fleetBinary()
			if err != nil {
				return err
			}
			opts.FleetBinary = self
			opts.Progress = cmd.ErrOrStderr()
			var baseline *bench.Baseline
			if baselineFile != "" {
				// Read first: a missing or broken file fails before the run.
				if baseline, err = bench.LoadBaseline(baselineFile); err != nil {
					return fmt.Errorf("--baseline: %w", err)
				}
			}
			results, err := bench.Run(cmd.Context(), opts)
			bench.WriteTable(cmd.OutOrStdout(), results)
			if jsonFile != "" && len(results) > 0 {
				if werr := bench.WriteJSON(jsonFile, results); werr != nil {
					return werr
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", jsonFile)
			}
			if err != nil {
				return err
			}
			if recordFile != "" {
				b, lerr := bench.LoadBaseline(recordFile)
				if errors.Is(lerr, fs.ErrNotExist) {
					b, lerr = &bench.Baseline{}, nil
				}
				if lerr != nil {
					return fmt.Errorf("--record-baseline: %w", lerr)
				}
				if err := b.Record(recordFile, results, opts.Quick, recordNote); err != nil {
					return fmt.Errorf("--record-baseline: %w", err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "recorded the p50 of %s in %s\n", strings.Join(bench.CheckedScenarios, ", "), recordFile)
			}
			if baseline != nil {
				if err := baseline.Check(results, opts.Quick); err != nil {
					return fmt.Errorf("latency regression against %s:\n%w", baselineFile, err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "latency within %.0f× of %s\n", bench.RegressionFactor, baselineFile)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.Quick, "quick", false, "smoke run for CI (every scenario group small: about six minutes on 2 cores)")
	f.IntVar(&opts.Clusters, "clusters", 0, "clusters in the scale and agent-rollout scenarios (default 1000, 50 with --quick) and in the fleet scenario (default 10000, 200 with --quick)")
	f.IntVar(&opts.Shards, "shards", 1, "controller shards")
	f.StringVar(&jsonFile, "json", "", "write the results as JSON to this file")
	f.StringSliceVar(&opts.Only, "only", nil, "run only these scenario groups: "+strings.Join(bench.Groups, ", ")+" (default: all)")
	f.StringVar(&opts.Render, "render", bench.RenderRemote, "where Bundles render: "+bench.RenderRemote+" (a fleet renderer process the controller reaches over TLS, as the chart installs it) or "+bench.RenderInPod+" (workers that are children of the controller, renderer.enabled=false)")
	f.StringArrayVar(&opts.ControllerArgs, "controller-arg", nil, "add this argument to the controller's command line, e.g. --controller-arg=--bundle-writers=32 (repeatable)")
	f.IntVar(&opts.Tunnels, "tunnels", 0, "idle tunnels in the tunnels-idle scenario (default 1000, 100 with --quick)")
	f.StringVar(&baselineFile, "baseline", "", "fail when the p50 of a checked scenario (each registration flow, a GET and a watch event through fleet-proxy) is more than 3× the value recorded for this mode in this file (dev/bench/baseline.json)")
	f.StringVar(&recordFile, "record-baseline", "", "record this run's p50s of the checked scenarios for its mode in this file")
	f.StringVar(&recordNote, "record-note", "", "with --record-baseline: where the figures were taken (machine, load)")
	f.StringVar(&opts.AuditDir, "audit-dir", "", "write the audit logs of the registration group's API servers (every request, metadata only) to DIR/upstream.log and DIR/downstream.log: the request timeline of one registration, e.g. where the manager-initiated push spends its time")
	f.StringVar(&opts.ProfileDir, "profile", "", "write CPU profiles of the controller(s), the upstream API server and this process (its stand-in agents), and the controllers' heap, taken during the scale scenario and the fleet scenario's Bundle change, to this directory")
	return cmd
}

func zapErrorLevel() zapcore.Level { return zapcore.ErrorLevel }
