package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/gitops-fleet/fleet/internal/dev/bench"
)

func newBenchCommand() *cobra.Command {
	opts := bench.Options{}
	var jsonFile string
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
			ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapErrorLevel())))
			// remotedialer logs through logrus, at info every tunnel's end:
			// a thousand lines when the idle tunnels stop.
			logrus.SetLevel(logrus.WarnLevel)
			self, err := os.Executable()
			if err != nil {
				return err
			}
			opts.FleetBinary = self
			opts.Progress = cmd.ErrOrStderr()
			results, err := bench.Run(cmd.Context(), opts)
			bench.WriteTable(cmd.OutOrStdout(), results)
			if jsonFile != "" && len(results) > 0 {
				if werr := bench.WriteJSON(jsonFile, results); werr != nil {
					return werr
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", jsonFile)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.Quick, "quick", false, "smoke run for CI (about two and a half minutes)")
	f.IntVar(&opts.Clusters, "clusters", 0, "clusters in the scale scenario (default 1000, 50 with --quick)")
	f.IntVar(&opts.Shards, "shards", 1, "controller shards")
	f.StringVar(&jsonFile, "json", "", "write the results as JSON to this file")
	f.StringSliceVar(&opts.Only, "only", nil, "run only these scenario groups: "+strings.Join(bench.Groups, ", ")+" (default: all)")
	f.IntVar(&opts.Tunnels, "tunnels", 0, "idle tunnels in the tunnels-idle scenario (default 1000, 100 with --quick)")
	f.StringVar(&opts.ProfileDir, "profile", "", "write CPU and heap profiles of the controller(s) taken during the scale scenario to this directory")
	return cmd
}

func zapErrorLevel() zapcore.Level { return zapcore.ErrorLevel }
