// Package bench measures registration: latency of both flows, many agents
// registering at once, the steady-state cost of heartbeats, and rendering.
// It runs on local control planes (internal/controlplane) with the
// controller as a separate process (so its memory and CPU are its own) and
// agents in-process, each with its own clientID, namespace and identity.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one scenario's figures; nil fields do not apply.
type Result struct {
	Name                          string   `json:"name"`
	Count                         int      `json:"count"`
	P50Ms                         *float64 `json:"p50_ms"`
	P95Ms                         *float64 `json:"p95_ms"`
	MaxMs                         *float64 `json:"max_ms"`
	WallS                         *float64 `json:"wall_s"`
	ThroughputPerS                *float64 `json:"throughput_per_s"`
	ControllerPeakRSSMB           *float64 `json:"controller_peak_rss_mb"`
	ControllerCPUS                *float64 `json:"controller_cpu_s"`
	UpstreamReadsPerRegistration  *float64 `json:"upstream_reads_per_registration"`
	UpstreamWritesPerRegistration *float64 `json:"upstream_writes_per_registration"`
	LeftoverObjects               *int     `json:"leftover_objects"`
	// fleet-proxy's process: current RSS, CPU as % of one core over the
	// scenario's window, RSS added per idle tunnel.
	ProxyRSSMB          *float64 `json:"proxy_rss_mb"`
	ProxyCPUPct         *float64 `json:"proxy_cpu_pct"`
	ProxyRSSPerTunnelKB *float64 `json:"proxy_rss_per_tunnel_kb"`
	// Goal says what the scenario aims for; Notes adds what the table cannot.
	Goal  string `json:"goal,omitempty"`
	Notes string `json:"notes,omitempty"`
}

func f(v float64) *float64 {
	v = math.Round(v*100) / 100
	return &v
}

func ms(d time.Duration) *float64 { return f(float64(d) / float64(time.Millisecond)) }

// latencies fills p50/p95/max from samples.
func (r *Result) latencies(samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	pick := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	r.P50Ms, r.P95Ms, r.MaxMs = ms(pick(0.5)), ms(pick(0.95)), ms(s[len(s)-1])
}

// WriteTable prints the results as a table.
func WriteTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tCOUNT\tP50 MS\tP95 MS\tMAX MS\tWALL S\tPER S\tCTRL RSS MB\tCTRL CPU S\tREADS/REG\tWRITES/REG\tLEFTOVER\tPROXY RSS MB\tPROXY CPU %\tGOAL")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Count,
			show(r.P50Ms), show(r.P95Ms), show(r.MaxMs), show(r.WallS), show(r.ThroughputPerS),
			show(r.ControllerPeakRSSMB), show(r.ControllerCPUS), show(r.UpstreamReadsPerRegistration),
			show(r.UpstreamWritesPerRegistration), showInt(r.LeftoverObjects), show(r.ProxyRSSMB), show(r.ProxyCPUPct), r.Goal)
	}
	_ = tw.Flush()
	for _, r := range results {
		if r.Notes != "" {
			fmt.Fprintf(w, "  %s: %s\n", r.Name, strings.TrimSpace(r.Notes))
		}
	}
}

func show(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *v)
}

func showInt(v *int) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// WriteJSON writes the results as a JSON list.
func WriteJSON(path string, results []Result) error {
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
