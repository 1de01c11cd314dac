package main

import (
	"encoding/json"
	"fmt"
	"io/fs"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gitops-fleet/fleet/charts"
	"github.com/gitops-fleet/fleet/internal/version"
)

// versionInfo is what `fleet version -o json` prints: the binary's
// version and the agent chart it carries (the chart the controller
// renders to install and update agents).
type versionInfo struct {
	version.Info
	AgentChart chartInfo `json:"agentChart"`
}

type chartInfo struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}

func embeddedAgentChart() (chartInfo, error) {
	b, err := fs.ReadFile(charts.FleetAgent(), "Chart.yaml")
	if err != nil {
		return chartInfo{}, fmt.Errorf("reading the embedded agent chart: %w", err)
	}
	var c chartInfo
	if err := yaml.Unmarshal(b, &c); err != nil {
		return chartInfo{}, fmt.Errorf("reading the embedded agent chart's Chart.yaml: %w", err)
	}
	return c, nil
}

// versionLine is the first line of `fleet version`, and all of `fleet --version`.
func versionLine(i version.Info) string {
	return fmt.Sprintf("fleet %s (commit %s, %s, %s)", i.Version, i.Commit, i.GoVersion, i.Platform)
}

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version and commit of this binary and the version of the agent chart it carries",
		Long: `Print the version and commit of this binary, the Go version it was built
with, and the version of the embedded agent chart (what the controller installs
in downstream clusters). The controller, agent, proxy and renderer log the same
version and commit in their first log line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: the output format must be text or json", output)
			}
			chart, err := embeddedAgentChart()
			if err != nil {
				return err
			}
			info := versionInfo{Info: version.Get(), AgentChart: chart}
			out := cmd.OutOrStdout()
			if output == "json" {
				b, err := json.MarshalIndent(info, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(out, "%s\n", b)
				return err
			}
			_, err = fmt.Fprintf(out, "%s\nagent chart: %s %s (appVersion %s)\n", versionLine(info.Info), chart.Name, chart.Version, chart.AppVersion)
			return err
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

// logStart is each long-running component's first log line: which build
// runs, to compare with `fleet version` and the image tag.
func logStart(log logr.Logger, component string) {
	log.Info("starting fleet "+component, version.KeysAndValues()...)
}
