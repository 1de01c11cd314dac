package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// TestRollout_CommandsShowAndSteerTheCurrentRollout runs `fleet rollout`
// against a real API server holding a halted AgentRollout (as the
// controller leaves one; the controller's reaction to each control is
// proved in controller/rollout): status prints the plan and, with --wait,
// fails on a halted rollout; resume, pause and abort write the spec; an
// aborted rollout does not resume; a finished one has nothing to pause.
func TestRollout_CommandsShowAndSteerTheCurrentRollout(t *testing.T) {
	env := testenv.StartControlPlanes(t, controlplane.Options{})
	c := env.Upstream.Client
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, env.Upstream.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	mk := func(name, rev string, st fleet.AgentRolloutStatus) {
		ro := &fleet.AgentRollout{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: fleet.AgentRolloutSpec{Revision: rev, PreviousRevision: "0123456789abcdef", Strategy: &fleet.AgentRolloutStrategy{AutoRollback: true}}}
		if err := c.Create(t.Context(), ro); err != nil {
			t.Fatal(err)
		}
		ro.Status = st
		if err := c.Status().Update(t.Context(), ro); err != nil {
			t.Fatal(err)
		}
	}
	mk("agent-0123456789ab", "0123456789abcdef", fleet.AgentRolloutStatus{Phase: fleet.RolloutComplete, Message: "every planned cluster runs revision 0123456789ab"})
	mk("agent-fedcba987654", "fedcba9876543210", fleet.AgentRolloutStatus{
		Current: true, Phase: fleet.RolloutHalted, Message: "halted at wave 1/2: 1 clusters did not run revision fedcba987654 Ready within 10m0s: ws/canary",
		Waves:    []fleet.AgentRolloutWave{{Canary: true, Clusters: []string{"ws/canary"}}, {Clusters: []string{"ws/a", "ws/b"}}},
		Clusters: 3, Pending: 2, Failed: 1, FailedClusters: []string{"ws/canary"}, RolledBack: []string{"ws/canary"},
	})

	out, err := runCLI(t, "rollout", "status", "--kubeconfig", kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"AgentRollout agent-fedcba987654: revision fedcba987654 (previous 0123456789ab)", "Phase:    Halted", "3 planned, 0 updated, 2 pending, 1 failed",
		"Rolled back: ws/canary", "wave 1 (canary)", "halted", "wave 2", "waiting", "ws/a, ws/b"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	_, err = runCLI(t, "rollout", "status", "--kubeconfig", kc, "--wait", "1s")
	var exit *exitError
	if !errors.As(err, &exit) || exit.Code != 1 || !strings.Contains(err.Error(), "Halted") {
		t.Fatalf("status --wait on a halted rollout: %v, want exit code 1 saying Halted", err)
	}
	// As main runs it: the reason it halted is printed on stderr.
	code, stdout, stderr := runMain(t, "rollout", "status", "--kubeconfig", kc, "--wait", "1s")
	if want := "error: AgentRollout agent-fedcba987654 is Halted: halted at wave 1/2: 1 clusters did not run revision fedcba987654 Ready within 10m0s: ws/canary\n"; code != 1 || stderr != want || !strings.Contains(stdout, "Phase:    Halted") {
		t.Errorf("status --wait, halted: exit %d, stderr %q; want 1 and %q", code, stderr, want)
	}
	code, stdout, _ = runMain(t, "rollout", "status", "--kubeconfig", kc, "-o", "json")
	var doc struct {
		Name, Revision, PreviousRevision, Phase, Message string
		Staged                                           bool
		Clusters, Updated, Pending, Failed               int
		FailedClusters, RolledBack                       []string
		Waves                                            []struct {
			Canary   bool
			State    string
			Clusters []string
		}
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || code != 0 {
		t.Fatalf("status -o json: exit %d, %v\n%s", code, err, stdout)
	}
	if doc.Name != "agent-fedcba987654" || doc.Revision != "fedcba9876543210" || doc.PreviousRevision != "0123456789abcdef" || doc.Phase != "Halted" || !doc.Staged ||
		doc.Clusters != 3 || doc.Pending != 2 || doc.Failed != 1 || len(doc.FailedClusters) != 1 || len(doc.RolledBack) != 1 || !strings.HasPrefix(doc.Message, "halted at wave 1/2") ||
		len(doc.Waves) != 2 || !doc.Waves[0].Canary || doc.Waves[0].State != "halted" || doc.Waves[1].State != "waiting" || len(doc.Waves[1].Clusters) != 2 {
		t.Errorf("status -o json: %+v", doc)
	}
	if code, stdout, _ := runMain(t, "rollout", "status", "agent-0123456789ab", "--kubeconfig", kc, "--wait", "1s", "-o", "json"); code != 0 || !strings.Contains(stdout, `"phase": "Complete"`) {
		t.Errorf("status --wait of a complete rollout: exit %d %s, want 0", code, stdout)
	}
	if code, _, stderr := runMain(t, "rollout", "status", "agent-missing", "--kubeconfig", kc, "--wait", "1s"); code != 2 || !strings.Contains(stderr, "AgentRollout agent-missing") || !strings.Contains(stderr, "not found") {
		t.Errorf("status --wait of a missing rollout: exit %d %q, want 2 (could not ask), naming it", code, stderr)
	}

	get := func() *fleet.AgentRollout {
		ro := &fleet.AgentRollout{}
		if err := c.Get(t.Context(), client.ObjectKey{Name: "agent-fedcba987654"}, ro); err != nil {
			t.Fatal(err)
		}
		return ro
	}
	if _, err := runCLI(t, "rollout", "pause", "--kubeconfig", kc); err != nil || !get().Spec.Paused {
		t.Fatalf("pause: %v, paused %v", err, get().Spec.Paused)
	}
	if _, err := runCLI(t, "rollout", "resume", "--kubeconfig", kc); err != nil || get().Spec.Paused || get().Spec.ResumeGeneration != 1 {
		t.Fatalf("resume: %v, spec %+v", err, get().Spec)
	}
	if _, err := runCLI(t, "rollout", "abort", "agent-fedcba987654", "--kubeconfig", kc); err != nil || !get().Spec.Aborted {
		t.Fatalf("abort: %v, spec %+v", err, get().Spec)
	}
	if _, err := runCLI(t, "rollout", "resume", "--kubeconfig", kc); err == nil || !strings.Contains(err.Error(), "aborted") {
		t.Fatalf("resume after abort: %v, want a refusal that says it was aborted", err)
	}
	if _, err := runCLI(t, "rollout", "pause", "agent-0123456789ab", "--kubeconfig", kc); exitCode(err) != 1 || !strings.Contains(err.Error(), "Complete") {
		t.Fatalf("pause of a complete rollout: %v, want a refusal (exit 1)", err)
	}
	if _, err := runCLI(t, "rollout", "status", "agent-missing", "--kubeconfig", kc); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("status of a missing rollout: %v", err)
	}
}
