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
	"github.com/gitops-fleet/fleet/internal/registration"
)

// identityKeyOf reads the agent's identity Secret and returns its public key.
func identityKeyOf(t *testing.T, s *corev1.Secret) string {
	t.Helper()
	k, err := registration.IdentityKeyFromSeed(s.Data[registration.KeyIdentitySeed])
	if err != nil {
		t.Fatalf("identity Secret: %v", err)
	}
	return k.PublicKey()
}

// TestAgent_IdentityKeyMadeBeforeRegisteringAndKept: the agent stores its
// identity key before it creates its first registration (one stopped
// before the key was stored made none), signs with it, and a new agent
// process (a crash after the grant, before the credential was stored)
// registers again with the same key, which the Cluster records and the
// heartbeat reports.
func TestAgent_IdentityKeyMadeBeforeRegisteringAndKept(t *testing.T) {
	ds := env.Downstreams[0]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	agentNS := "agent-" + ws
	clientID := "identity-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": clientID})
	if _, err := localSecret(t, ds, agentNS, registration.IdentitySecretName); err == nil {
		t.Fatal("the chart rendered the identity Secret: helm uninstall would delete it")
	}

	// Stopped before its key is stored: no registration was made.
	crash := newCrashPoint(http.MethodPost, registration.IdentitySecretName, true)
	zeroth := startAgent(t, ds, agentNS, crash)
	select {
	case <-crash.hit:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent never stored its identity key")
	}
	zeroth.stop()
	if n := countRegistrations(t, ws, clientID); n != 0 {
		t.Fatalf("%d registrations made before the identity key was stored", n)
	}

	// Stopped after the grant, before the credential is stored.
	crash = newCrashPoint(http.MethodPost, registration.AgentCredentialSecretName, true)
	first := startAgent(t, ds, agentNS, crash)
	select {
	case <-crash.hit:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent never received its credential")
	}
	first.stop()
	stored, err := localSecret(t, ds, agentNS, registration.IdentitySecretName)
	if err != nil {
		t.Fatalf("no identity Secret once the registration was made: %v", err)
	}
	key := identityKeyOf(t, stored)
	if n := countRegistrations(t, ws, clientID); n != 1 {
		t.Fatalf("%d registrations before the restart, want the first one", n)
	}

	second := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, second)
	c := waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
	if got := c.Annotations[fleet.AgentIdentityKeyAnnotation]; got != key {
		t.Errorf("the Cluster records key %q, want the agent's %q", got, key)
	}
	testenv.Eventually(t, 10*time.Second, "the heartbeat to report the identity key", func() error {
		if got := getCluster(t, ws, name).Status.Agent.IdentityPublicKey; got != key {
			return fmt.Errorf("status.agent.identityPublicKey %q", got)
		}
		return nil
	})
	now, err := localSecret(t, ds, agentNS, registration.IdentitySecretName)
	if err != nil {
		t.Fatal(err)
	}
	if identityKeyOf(t, now) != key {
		t.Error("the identity key changed across agent processes")
	}
	regs := &fleet.ClusterRegistrationList{}
	if err := up.List(t.Context(), regs, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	for _, r := range regs.Items {
		if r.Spec.ClientID == clientID && r.Spec.IdentityPublicKey != key {
			t.Errorf("registration %s signed by %q", r.Name, r.Spec.IdentityPublicKey)
		}
	}
}

// TestAgent_RejectedCredentialWithoutBootstrapRecoversThroughTheRecoveryIdentity:
// an agent stopped while its request credential dies (its ServiceAccount is
// deleted upstream: the API server answers 401, as for an expired token)
// has no bootstrap Secret any more; started again, it registers by itself
// with the recovery token it minted while it was online, signed with its
// key, and its cluster is Ready again.
func TestAgent_RejectedCredentialWithoutBootstrapRecoversThroughTheRecoveryIdentity(t *testing.T) {
	ds := env.Downstreams[1]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	agentNS := "agent-" + ws
	clientID := "recover-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": clientID})
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
	testenv.Eventually(t, 30*time.Second, "a recovery token in the identity Secret", func() error {
		s, err := localSecret(t, ds, agentNS, registration.IdentitySecretName)
		if err != nil {
			return err
		}
		if len(s.Data[registration.KeyRecoveryToken]) == 0 || string(s.Data[registration.KeyClusterName]) != name {
			return fmt.Errorf("keys %v", keys(s.Data))
		}
		return nil
	})
	a.stop()

	cred, err := localSecret(t, ds, agentNS, registration.AgentCredentialSecretName)
	if err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Namespace: string(cred.Data[registration.KeyDeploymentNamespace]), Name: string(cred.Data[registration.KeyServiceAccount])}}
	if err := up.Delete(t.Context(), sa); err != nil {
		t.Fatalf("deleting the request ServiceAccount: %v", err)
	}
	if _, err := localSecret(t, ds, agentNS, registration.BootstrapSecretName); err == nil {
		t.Fatal("a bootstrap Secret is left: the agent would not need its recovery identity")
	}

	again := startAgent(t, ds, agentNS, nil)
	testenv.Eventually(t, 60*time.Second, "registered again through the recovery identity", func() error {
		regs := &fleet.ClusterRegistrationList{}
		if err := up.List(t.Context(), regs, client.InNamespace(ws), client.MatchingLabels{fleet.RecoveryNamespaceLabel: sa.Namespace}); err != nil {
			return err
		}
		for _, r := range regs.Items {
			if r.Status.Granted && r.Status.ClusterName == name {
				return nil
			}
		}
		return fmt.Errorf("%d recovery registrations, none granted (agent: %v)", len(regs.Items), again.ReadyCheck(nil))
	})
	_, got := waitRegistered(t, again)
	if got != name {
		t.Errorf("recovered as %q, want %q", got, name)
	}
	waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
	if n := countRegistrations(t, ws, clientID); n != 1 {
		t.Errorf("%d registrations of the clientID left, want the recovery one", n)
	}
}

// TestAgent_RecoveryRefusedIsForgottenAndSaysWhatToDo: when the upstream no
// longer knows the recovery identity (the Cluster was deleted), the agent
// drops the recovery token and reports the stuck state with its fix,
// instead of registering with it again and again.
func TestAgent_RecoveryRefusedIsForgottenAndSaysWhatToDo(t *testing.T) {
	ds := env.Downstreams[0]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": "forget-" + ws})
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	testenv.Eventually(t, 30*time.Second, "a recovery token in the identity Secret", func() error {
		s, err := localSecret(t, ds, agentNS, registration.IdentitySecretName)
		if err != nil {
			return err
		}
		if len(s.Data[registration.KeyRecoveryToken]) == 0 {
			return fmt.Errorf("keys %v", keys(s.Data))
		}
		return nil
	})
	if err := up.Delete(t.Context(), &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the recovery token forgotten and the fix reported", func() error {
		err := a.ReadyCheck(nil)
		if err == nil || !strings.Contains(err.Error(), "no working credential") || !strings.Contains(err.Error(), "helm upgrade --install fleet-agent") {
			return fmt.Errorf("ready check: %v", err)
		}
		s, gerr := localSecret(t, ds, agentNS, registration.IdentitySecretName)
		if gerr != nil {
			return gerr
		}
		if len(s.Data[registration.KeyRecoveryToken]) > 0 {
			return fmt.Errorf("recovery token still kept (ready check: %v)", err)
		}
		if len(s.Data[registration.KeyIdentitySeed]) == 0 {
			return fmt.Errorf("the identity key went with it")
		}
		return nil
	})
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
