package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gitops-fleet/fleet/internal/version"
)

// `fleet version` names the embedded agent chart (the one the controller
// installs agents from) in both formats, and refuses a format it does not
// have, naming the ones it has. Stamping is tested on a `make build`
// binary in internal/version.
func TestVersion(t *testing.T) {
	out, err := runCLI(t, "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got versionInfo
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	chart, err := embeddedAgentChart()
	if err != nil {
		t.Fatal(err)
	}
	if got.Info != version.Get() || got.AgentChart != chart || chart.Name != "fleet-agent" || chart.Version == "" {
		t.Errorf("fleet version -o json: %+v; want %+v and chart %+v", got, version.Get(), chart)
	}
	text, err := runCLI(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	if want := versionLine(version.Get()) + "\nagent chart: fleet-agent " + chart.Version + " (appVersion " + chart.AppVersion + ")\n"; string(text) != want {
		t.Errorf("fleet version:\n%s\nwant:\n%s", text, want)
	}
	if _, err := runCLI(t, "version", "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "text or json") {
		t.Errorf("fleet version -o yaml: %v; want an error naming text and json", err)
	}
}
