package bench

import (
	"path/filepath"
	"strings"
	"testing"
)

func p50(name string, v float64) Result { return Result{Name: name, P50Ms: &v} }

func TestBaseline_FailsOnlyBeyondThreeTimesTheRecordedP50(t *testing.T) {
	path := filepath.Join(t.TempDir(), "baseline.json")
	b := &Baseline{}
	if err := b.Record(path, []Result{p50("agent-initiated", 100), p50("manager-initiated", 300), p50("ready-to-connected", 0), p50("scale", 9)}, true, "test"); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadBaseline(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := loaded.Modes["quick"].P50Ms["scale"]; ok {
		t.Errorf("recorded an unchecked scenario: %+v", loaded.Modes["quick"])
	}
	for _, tc := range []struct {
		name    string
		results []Result
		quick   bool
		wantErr string
	}{
		{name: "as recorded", results: []Result{p50("agent-initiated", 100), p50("manager-initiated", 300), p50("ready-to-connected", 0)}, quick: true},
		{name: "three times is still fine", results: []Result{p50("agent-initiated", 300), p50("manager-initiated", 900), p50("ready-to-connected", 0)}, quick: true},
		{name: "agent-initiated slower", results: []Result{p50("agent-initiated", 301), p50("manager-initiated", 300), p50("ready-to-connected", 0)}, quick: true, wantErr: "agent-initiated: p50 301.0 ms is more than 3× the 100.0 ms"},
		{name: "manager-initiated slower", results: []Result{p50("agent-initiated", 10), p50("manager-initiated", 1000), p50("ready-to-connected", 0)}, quick: true, wantErr: "manager-initiated: p50 1000.0 ms"},
		{name: "recorded zero: up to its goal is fine", results: []Result{p50("agent-initiated", 100), p50("manager-initiated", 300), p50("ready-to-connected", 1000)}, quick: true},
		{name: "recorded zero: beyond its goal", results: []Result{p50("agent-initiated", 100), p50("manager-initiated", 300), p50("ready-to-connected", 1001)}, quick: true, wantErr: "ready-to-connected: p50 1001.0 ms is more than its goal, 1000 ms"},
		{name: "not measured", results: []Result{p50("manager-initiated", 300), p50("ready-to-connected", 0)}, quick: true, wantErr: "agent-initiated: not measured"},
		{name: "no p50", results: []Result{{Name: "agent-initiated"}, p50("manager-initiated", 300), p50("ready-to-connected", 0)}, quick: true, wantErr: "agent-initiated: not measured"},
		{name: "no figures for full runs", results: []Result{p50("agent-initiated", 1)}, quick: false, wantErr: "records nothing for full runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := loaded.Check(tc.results, tc.quick)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("want no error, got %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("want an error with %q, got %v", tc.wantErr, err)
			}
		})
	}
	// Recording the other mode keeps this one.
	if err := loaded.Record(path, []Result{p50("agent-initiated", 50)}, false, ""); err != nil {
		t.Fatal(err)
	}
	again, _ := LoadBaseline(path)
	if again.Modes["quick"].P50Ms["agent-initiated"] != 100 || again.Modes["full"].P50Ms["agent-initiated"] != 50 {
		t.Errorf("modes after recording full: %+v", again.Modes)
	}
}
