package agent_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
)

func TestAgent_NoBootstrapIsAClearStuckState(t *testing.T) {
	ds := env.Downstreams[0]
	ns := testenv.Namespace(t, ds.Client, "agent-empty-")
	a := startAgent(t, ds, ns, nil)
	testenv.Eventually(t, 20*time.Second, "stuck state reported", func() error {
		err := a.ReadyCheck(nil)
		if err == nil || !strings.Contains(err.Error(), "no fleet-agent-bootstrap Secret") || !strings.Contains(err.Error(), "helm upgrade --install fleet-agent") {
			return fmt.Errorf("ready check: %v", err)
		}
		return nil
	})
	testenv.Eventually(t, 10*time.Second, "a NoBootstrapCredential event", func() error {
		evs := &corev1.EventList{}
		if err := ds.Client.List(t.Context(), evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == fleet.NoBootstrapCredentialReason && strings.Contains(e.Message, "helm upgrade --install") {
				return nil
			}
		}
		return fmt.Errorf("events: %+v", evs.Items)
	})
}

func TestAgent_DeletedTokenIsRefusedClearly(t *testing.T) {
	ds := env.Downstreams[0]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "short", fleet.ClusterRegistrationTokenSpec{})
	// The token goes (as at expiry) before the agent uses it.
	if err := up.Delete(t.Context(), &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "short"}}); err != nil {
		t.Fatal(err)
	}
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, nil)
	testenv.Eventually(t, 30*time.Second, "import ServiceAccount gone", func() error {
		sa := &corev1.ServiceAccount{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "import-short"}, sa); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	a := startAgent(t, ds, agentNS, nil)
	testenv.Eventually(t, 20*time.Second, "refusal reported", func() error {
		err := a.ReadyCheck(nil)
		if err == nil || !strings.Contains(err.Error(), "refused the import token") {
			return fmt.Errorf("ready check: %v", err)
		}
		return nil
	})
}

// TestAgent_RefusedRegistrationIsReportedAtOnce: the controller refuses
// the registration (its token may register another clientID only, and the
// agent was installed with its own); the
// agent reads the refusal in its registration's status and reports the
// controller's reason and message, instead of waiting out its
// registration timeout.
func TestAgent_RefusedRegistrationIsReportedAtOnce(t *testing.T) {
	ds := env.Downstreams[0]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "bound", fleet.ClusterRegistrationTokenSpec{ClientID: "some-other-cluster"})
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": "this-cluster-" + ws})
	a := startAgent(t, ds, agentNS, nil)
	testenv.Eventually(t, 30*time.Second, "refusal reported", func() error {
		err := a.ReadyCheck(nil)
		if err == nil || !strings.Contains(err.Error(), "the upstream refused registration") || !strings.Contains(err.Error(), `may only register clientID "some-other-cluster"`) {
			return fmt.Errorf("ready check: %v", err)
		}
		return nil
	})
}

func TestAgent_RenewsItsCredentialWithoutRegisteringAgain(t *testing.T) {
	ds := env.Downstreams[1]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	agentNS := "agent-" + ws
	clientID := "renew-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": clientID})
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	a.stop()

	// Pretend the credential was issued long ago: two thirds of its
	// lifetime have passed, so the agent renews it when it starts.
	cred, err := localSecret(t, ds, agentNS, "fleet-agent")
	if err != nil {
		t.Fatal(err)
	}
	oldKubeconfig := string(cred.Data["kubeconfig"])
	expires, _ := time.Parse(time.RFC3339, string(cred.Data["expires"]))
	cred.Data["issued"] = []byte(expires.Add(-10 * time.Hour).UTC().Format(time.RFC3339))
	if err := ds.Client.Update(t.Context(), cred); err != nil {
		t.Fatal(err)
	}
	a2 := startAgent(t, ds, agentNS, nil)
	testenv.Eventually(t, 30*time.Second, "credential renewed", func() error {
		s, err := localSecret(t, ds, agentNS, "fleet-agent")
		if err != nil {
			return err
		}
		if string(s.Data["kubeconfig"]) == oldKubeconfig {
			return fmt.Errorf("same token")
		}
		return nil
	})
	if _, n := a2.Registered(); n != name {
		t.Errorf("registered as %q after renewal, want %q", n, name)
	}
	if n := countRegistrations(t, ws, clientID); n != 1 {
		t.Errorf("%d ClusterRegistrations: renewal must not register again", n)
	}
	waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
}

func TestAgent_DeletingTheClusterRevokesTheAgentWithinSeconds(t *testing.T) {
	ds := env.Downstreams[1]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": "revoke-" + ws})
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	start := time.Now()
	if err := up.Delete(t.Context(), &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "agent cut off", func() error {
		if err := a.ReadyCheck(nil); err == nil || !strings.Contains(err.Error(), "no working credential") {
			return fmt.Errorf("ready check: %v", err)
		}
		return nil
	})
	t.Logf("agent lost access %s after the Cluster was deleted", time.Since(start).Round(100*time.Millisecond))
}

func TestOffline_ClusterTurnsOfflineAndBack(t *testing.T) {
	ds := env.Downstreams[0]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": "offline-" + ws})
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
	a.stop()
	stopped := time.Now()
	c := waitReady(t, ws, name, metav1.ConditionFalse, fleet.OfflineReason)
	t.Logf("offline %s after the agent stopped (3 missed heartbeats of %s)", time.Since(stopped).Round(100*time.Millisecond), heartbeat)
	if c.Status.Display.State != "Offline" {
		t.Errorf("display state %q", c.Status.Display.State)
	}
	startAgent(t, ds, agentNS, nil)
	waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
}

// TestAgent_RestartAtAnyHandshakeStepConverges stops the agent at each of
// its writes in the handshake (before storing its identity key; after the
// registration was made and granted, before storing the credential; right
// after storing it; right after deleting the bootstrap Secret) and starts a
// new one: registration completes, with exactly one Cluster and one
// registration left.
func TestAgent_RestartAtAnyHandshakeStepConverges(t *testing.T) {
	for _, step := range []struct {
		name           string
		method, secret string
		before         bool
	}{
		{"before-identity-stored", http.MethodPost, registration.IdentitySecretName, true},
		{"before-credential-stored", http.MethodPost, registration.AgentCredentialSecretName, true},
		{"credential-stored", http.MethodPost, registration.AgentCredentialSecretName, false},
		{"bootstrap-deleted", http.MethodDelete, registration.BootstrapSecretName, false},
	} {
		t.Run(step.name, func(t *testing.T) {
			ds := env.Downstreams[1]
			ws := testenv.Namespace(t, up, "fleet-ws-")
			values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
			agentNS := "agent-" + ws
			clientID := "restart-" + ws
			helmInstall(t, ds, agentNS, values, map[string]any{"clientID": clientID})
			crash := newCrashPoint(step.method, step.secret, step.before)
			first := startAgent(t, ds, agentNS, crash)
			select {
			case <-crash.hit:
			case <-time.After(30 * time.Second):
				t.Fatalf("the agent never reached step %s", step.name)
			}
			first.stop()
			second := startAgent(t, ds, agentNS, nil)
			_, name := waitRegistered(t, second)
			waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
			testenv.Eventually(t, 30*time.Second, "one Cluster and one registration", func() error {
				list := &fleet.ClusterList{}
				if err := up.List(t.Context(), list, client.InNamespace(ws)); err != nil {
					return err
				}
				if len(list.Items) != 1 || list.Items[0].Name != names.AutoClusterName(clientID) {
					return fmt.Errorf("%d clusters", len(list.Items))
				}
				if n := countRegistrations(t, ws, clientID); n != 1 {
					return fmt.Errorf("%d registrations", n)
				}
				return nil
			})
			if _, err := localSecret(t, ds, agentNS, "fleet-agent-bootstrap"); err == nil {
				t.Error("bootstrap Secret left behind")
			}
		})
	}
}

// TestManagerInitiated_AgentPushedByTheControllerRegisters runs the whole
// manager-initiated flow: Cluster + kubeconfig Secret upstream, the
// controller pushes the agent's objects, the agent (run here in-process, as
// nothing runs pods in these control planes) registers and reports in.
func TestManagerInitiated_AgentPushedByTheControllerRegisters(t *testing.T) {
	ds := env.Downstreams[0]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	agentNS := "agent-" + ws
	if err := up.Create(t.Context(), ds.KubeconfigSecret(ws, "kc")); err != nil {
		t.Fatal(err)
	}
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "pushed"}, Spec: fleet.ClusterSpec{KubeConfigSecret: "kc", AgentNamespace: agentNS}}
	if err := up.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "bootstrap Secret pushed downstream", func() error {
		_, err := localSecret(t, ds, agentNS, "fleet-agent-bootstrap")
		return err
	})
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	if name != "pushed" {
		t.Fatalf("registered as %q, want the Cluster that pushed it", name)
	}
	waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)

	// A bump redeploys with a fresh bootstrap and removes the credential:
	// the running agent registers again, to the same Cluster.
	first := &fleet.ClusterRegistrationList{}
	if err := up.List(t.Context(), first, client.InNamespace(ws)); err != nil || len(first.Items) != 1 {
		t.Fatalf("want one registration before the bump: %v %d", err, len(first.Items))
	}
	updateCluster(t, ws, name, func(cur *fleet.Cluster) {
		cur.Spec.RedeployAgentGeneration = 1
	})
	// Several hops (the controller's push, the agent's session ending, a
	// registration granted, the credential stored and the bootstrap
	// deleted): a loaded machine has taken more than 30 s.
	testenv.Eventually(t, 2*time.Minute, "registered again after the redeploy", func() error {
		regs := &fleet.ClusterRegistrationList{}
		if err := up.List(t.Context(), regs, client.InNamespace(ws)); err != nil {
			return err
		}
		if len(regs.Items) != 1 || !regs.Items[0].Status.Granted || regs.Items[0].Name == first.Items[0].Name {
			return fmt.Errorf("%d registrations", len(regs.Items))
		}
		if _, err := localSecret(t, ds, agentNS, "fleet-agent"); err != nil {
			return err
		}
		if _, err := localSecret(t, ds, agentNS, "fleet-agent-bootstrap"); err == nil {
			return fmt.Errorf("bootstrap not consumed yet")
		}
		return nil
	})
	waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
}
