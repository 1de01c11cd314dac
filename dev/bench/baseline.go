package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// RegressionFactor is how much slower than its recorded p50 a checked
// scenario may be before the check fails: wide enough for a loaded CI
// machine, narrow enough to catch a change that adds a sleep or a poll
// to the handshake.
const RegressionFactor = 3.0

// Baseline is the p50 latencies recorded in the repository
// (dev/bench/baseline.json) for each mode of the run, against
// which a run is checked (fleet-dev bench --baseline).
type Baseline struct {
	// Modes maps "quick" or "full" to its recorded figures.
	Modes map[string]Recorded `json:"modes"`
}

// Recorded is one mode's figures and where they came from.
type Recorded struct {
	// P50Ms maps a scenario name to its recorded p50.
	P50Ms map[string]float64 `json:"p50_ms"`
	// On says when and how the figures were taken.
	On string `json:"on"`
}

// CheckedScenarios are the scenarios whose latency the baseline guards:
// one registration of each flow, and a GET through fleet-proxy (the
// aggregated path and its endpoint) and a watch event through it. A
// scenario the baseline does not record yet is not checked.
var CheckedScenarios = []string{"agent-initiated", "manager-initiated", "ready-to-connected", "access-get-proxy", "access-get-proxy-endpoint", "access-watch-proxy"}

// CheckFloorMs is, per checked scenario, a p50 a run may always reach
// whatever was recorded: its goal, for a scenario whose recorded p50 is
// at or near zero (Connected comes before Ready), which three times would
// not leave room for.
var CheckFloorMs = map[string]float64{"ready-to-connected": 1000}

func mode(quick bool) string {
	if quick {
		return "quick"
	}
	return "full"
}

// LoadBaseline reads a baseline file.
func LoadBaseline(path string) (*Baseline, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b := &Baseline{}
	if err := json.Unmarshal(raw, b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// Check compares a run's checked scenarios with the figures recorded for
// its mode. A checked scenario that is recorded but missing from the run,
// or has no p50, fails too: a check that did not measure must not pass.
func (b *Baseline) Check(results []Result, quick bool) error {
	rec, ok := b.Modes[mode(quick)]
	if !ok || len(rec.P50Ms) == 0 {
		return fmt.Errorf("the baseline records nothing for %s runs: record one with --record-baseline", mode(quick))
	}
	var errs []error
	for _, name := range CheckedScenarios {
		want, ok := rec.P50Ms[name]
		if !ok {
			continue
		}
		i := slices.IndexFunc(results, func(r Result) bool { return r.Name == name })
		switch {
		case i < 0 || results[i].P50Ms == nil:
			errs = append(errs, fmt.Errorf("%s: not measured in this run, so its latency cannot be checked", name))
		case *results[i].P50Ms > max(RegressionFactor*want, CheckFloorMs[name]):
			if floor := CheckFloorMs[name]; floor > RegressionFactor*want {
				errs = append(errs, fmt.Errorf("%s: p50 %.1f ms is more than its goal, %.0f ms (%.1f ms recorded, %s): something made it slower",
					name, *results[i].P50Ms, floor, want, rec.On))
				continue
			}
			errs = append(errs, fmt.Errorf("%s: p50 %.1f ms is more than %.0f× the %.1f ms recorded (%s): something made it slower",
				name, *results[i].P50Ms, RegressionFactor, want, rec.On))
		}
	}
	return errors.Join(errs...)
}

// Record sets the figures of this run's mode from results and writes the
// baseline to path.
func (b *Baseline) Record(path string, results []Result, quick bool, note string) error {
	rec := Recorded{P50Ms: map[string]float64{}, On: strings.TrimSpace(time.Now().UTC().Format("2006-01-02") + " " + note)}
	for _, r := range results {
		if slices.Contains(CheckedScenarios, r.Name) && r.P50Ms != nil {
			rec.P50Ms[r.Name] = *r.P50Ms
		}
	}
	if len(rec.P50Ms) == 0 {
		return errors.New("this run measured none of the checked scenarios (" + strings.Join(CheckedScenarios, ", ") + "): nothing to record")
	}
	if b.Modes == nil {
		b.Modes = map[string]Recorded{}
	}
	b.Modes[mode(quick)] = rec
	out, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(out, '\n'), 0o644)
}
