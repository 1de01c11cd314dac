package deployer

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

func TestClusterMismatch_OnlyTheAgentsOwnClusterPasses(t *testing.T) {
	own := map[string]string{fleet.ClusterLabel: "prod-1", fleet.ClusterNamespaceLabel: "fleet-default", "other": "x"}
	cases := []struct {
		name   string
		labels map[string]string
		want   []string // substrings of the message; nil: no mismatch
	}{
		{"own cluster", own, nil},
		{"other cluster", map[string]string{fleet.ClusterLabel: "prod-2", fleet.ClusterNamespaceLabel: "fleet-default"}, []string{`"prod-2"`, `this agent is cluster "prod-1" in workspace "fleet-default"`}},
		{"other workspace", map[string]string{fleet.ClusterLabel: "prod-1", fleet.ClusterNamespaceLabel: "team-b"}, []string{`workspace "team-b"`}},
		{"no labels", nil, []string{"cluster (none) in workspace (none)", fleet.ClusterLabel}},
		{"cluster label only", map[string]string{fleet.ClusterLabel: "prod-1"}, []string{"workspace (none)"}},
		{"empty values", map[string]string{fleet.ClusterLabel: "", fleet.ClusterNamespaceLabel: ""}, []string{`cluster "" in workspace ""`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := clusterMismatch(c.labels, "fleet-default", "prod-1")
			if c.want == nil {
				if got != "" {
					t.Fatalf("mismatch %q for the agent's own labels", got)
				}
				return
			}
			if got == "" {
				t.Fatal("no mismatch reported")
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("message %q lacks %q", got, w)
				}
			}
		})
	}
}

func TestIsAgentBundle_ByItsLabelForThisCluster(t *testing.T) {
	own := map[string]string{fleet.ClusterLabel: "prod", fleet.ClusterNamespaceLabel: "fleet-default"}
	with := func(l map[string]string, kv ...string) map[string]string {
		out := maps.Clone(l)
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(out, kv[i])
				continue
			}
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	cases := []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{"the controller's label for this cluster", with(own, fleet.AgentBundleLabel, "true"), true},
		{"no label: a Bundle named fleet-agent-prod is not enough", own, false},
		{"label for another cluster", with(own, fleet.AgentBundleLabel, "true", fleet.ClusterLabel, "prod-2"), false},
		{"label for another workspace", with(own, fleet.AgentBundleLabel, "true", fleet.ClusterNamespaceLabel, "fleet-local"), false},
		{"label without cluster labels", map[string]string{fleet.AgentBundleLabel: "true"}, false},
		{"label with another value", with(own, fleet.AgentBundleLabel, "yes"), false},
	}
	for _, c := range cases {
		if got := isAgentBundle(c.labels, "fleet-default", "prod"); got != c.want {
			t.Errorf("%s: isAgentBundle(%v) = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

func TestRefused_ListsAtMostFiveAndSaysWhatToDo(t *testing.T) {
	var reasons []string
	for i := range 7 {
		reasons = append(reasons, fmt.Sprintf("r%d", i))
	}
	d := &Deployer{opts: Options{ResyncInterval: time.Minute}}
	w := d.refused("serviceaccount ns/sa", reasons, "nothing of this deployment was applied")
	if w.Reason != fleet.ForbiddenReason || w.RequeueAfter < time.Minute {
		t.Errorf("reason %s, requeue after %s: want %s, at the next resync", w.Reason, w.RequeueAfter, fleet.ForbiddenReason)
	}
	msg := w.Error()
	for _, w := range []string{"r0; r1; r2; r3; r4 and 2 more", "nothing of this deployment was applied", "give serviceaccount ns/sa get, create, patch and delete"} {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q lacks %q", msg, w)
		}
	}
	if strings.Contains(msg, "r5") {
		t.Errorf("message %q lists more than five", msg)
	}
}
