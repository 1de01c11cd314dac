package agent_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
)

// withManageAgent turns manageagent on for one test.
func withManageAgent(t *testing.T) {
	t.Helper()
	cfg := *ctrl.Config.Get()
	before := cfg
	cfg.ManageAgent = ptr.To(true)
	ctrl.Config.Set(&cfg)
	t.Cleanup(func() { ctrl.Config.Set(&before) })
}

func agentDeployment(t *testing.T, ds *controlplane.ControlPlane, ns string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "fleet-agent"}, d); err != nil {
		t.Fatalf("agent Deployment: %v", err)
	}
	return d
}

func podTemplate(d *appsv1.Deployment) string {
	b, _ := json.Marshal(d.Spec.Template)
	return string(b)
}

// waitAgentBundleApplied waits until the agent has applied the current
// content of its own Bundle.
func waitAgentBundleApplied(t *testing.T, ws, cluster string) *fleet.BundleDeployment {
	t.Helper()
	bd := &fleet.BundleDeployment{}
	testenv.Eventually(t, 60*time.Second, "agent Bundle applied by the agent", func() error {
		key := client.ObjectKey{Namespace: names.ClusterNamespace(ws, cluster), Name: names.AgentBundle(cluster)}
		if err := up.Get(t.Context(), key, bd); err != nil {
			return err
		}
		if bd.Spec.DeploymentID == "" || bd.Status.AppliedDeploymentID != bd.Spec.DeploymentID {
			return fmt.Errorf("applied %q, want %q (conditions %+v)", bd.Status.AppliedDeploymentID, bd.Spec.DeploymentID, bd.Status.Conditions)
		}
		return nil
	})
	// The deployer knows its own Bundle by this label, not by the name.
	if bd.Labels[fleet.AgentBundleLabel] != "true" {
		t.Errorf("the agent Bundle's BundleDeployment lacks label %s=true: %v", fleet.AgentBundleLabel, bd.Labels)
	}
	return bd
}

func envGeneration(d *appsv1.Deployment) string {
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "GENERATION" {
			return e.Value
		}
	}
	return ""
}

// TestManageAgent_AdoptionWithoutRestartThenOneRolloutPerBump: the
// controller pushes the agent; the agent then applies its own Bundle under
// the same field manager: no conflict, no pod template change (no restart).
// A redeployAgentGeneration bump then rolls the agent exactly once.
func TestManageAgent_AdoptionWithoutRestartThenOneRolloutPerBump(t *testing.T) {
	withManageAgent(t)
	ds := env.Downstreams[0]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	agentNS := "agent-" + ws
	if err := up.Create(t.Context(), ds.KubeconfigSecret(ws, "kc")); err != nil {
		t.Fatal(err)
	}
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "managed"}, Spec: fleet.ClusterSpec{KubeConfigSecret: "kc", AgentNamespace: agentNS}}
	if err := up.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	// The push applies the bootstrap Secret before the Deployment: wait for
	// both.
	testenv.Eventually(t, 60*time.Second, "agent pushed", func() error {
		if _, err := localSecret(t, ds, agentNS, "fleet-agent-bootstrap"); err != nil {
			return err
		}
		return ds.Client.Get(t.Context(), client.ObjectKey{Namespace: agentNS, Name: "fleet-agent"}, &appsv1.Deployment{})
	})
	pushed := agentDeployment(t, ds, agentNS)

	a := startAgent(t, ds, agentNS, nil)
	waitRegistered(t, a)
	waitAgentBundleApplied(t, ws, "managed")
	adopted := agentDeployment(t, ds, agentNS)
	if adopted.Generation != pushed.Generation || podTemplate(adopted) != podTemplate(pushed) {
		t.Errorf("adoption changed the pod template (the agent would restart): generation %d -> %d", pushed.Generation, adopted.Generation)
	}
	if adopted.ResourceVersion != pushed.ResourceVersion {
		t.Errorf("adoption rewrote the Deployment (resourceVersion %s -> %s)", pushed.ResourceVersion, adopted.ResourceVersion)
	}
	for _, mf := range adopted.ManagedFields {
		if mf.Manager != "fleet" && mf.Operation == metav1.ManagedFieldsOperationApply {
			t.Errorf("another apply manager owns fields: %s", mf.Manager)
		}
	}

	// One bump, one rollout: the push and the agent's own Bundle carry the
	// same Deployment.
	updateCluster(t, ws, "managed", func(cur *fleet.Cluster) {
		cur.Spec.RedeployAgentGeneration = 1
	})
	waitRegistered(t, a)
	testenv.Eventually(t, 60*time.Second, "GENERATION=1 applied", func() error {
		if g := envGeneration(agentDeployment(t, ds, agentNS)); g != "1" {
			return fmt.Errorf("GENERATION=%q", g)
		}
		return nil
	})
	waitAgentBundleApplied(t, ws, "managed")
	time.Sleep(3 * time.Second) // resyncs and heartbeats pass
	if d := agentDeployment(t, ds, agentNS); d.Generation != adopted.Generation+1 {
		t.Errorf("want exactly one rollout for one bump: Deployment generation %d -> %d", adopted.Generation, d.Generation)
	}
}

// TestManageAgent_AgentInitiatedClusterFollowsGenerationBump: Fleet ignores
// the bump for agent-initiated clusters; here it reaches the agent through
// its Bundle and rolls it once.
func TestManageAgent_AgentInitiatedClusterFollowsGenerationBump(t *testing.T) {
	withManageAgent(t)
	ds := env.Downstreams[1]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": "ai-" + ws})
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	waitAgentBundleApplied(t, ws, name)
	before := agentDeployment(t, ds, agentNS)

	updateCluster(t, ws, name, func(cur *fleet.Cluster) {
		cur.Spec.RedeployAgentGeneration = 5
	})
	testenv.Eventually(t, 60*time.Second, "GENERATION=5 applied by the agent", func() error {
		if g := envGeneration(agentDeployment(t, ds, agentNS)); g != "5" {
			b := &fleet.Bundle{}
			_ = up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: names.AgentBundle(name)}, b)
			bd := &fleet.BundleDeployment{}
			_ = up.Get(t.Context(), client.ObjectKey{Namespace: names.ClusterNamespace(ws, name), Name: names.AgentBundle(name)}, bd)
			c := getCluster(t, ws, name)
			return fmt.Errorf("GENERATION=%q; bundle gen %d hash %s; bd spec %s applied %s conds %+v; cluster conds %+v", g, b.Generation, b.Annotations, bd.Spec.DeploymentID, bd.Status.AppliedDeploymentID, bd.Status.Conditions, c.Status.Conditions)
		}
		return nil
	})
	waitAgentBundleApplied(t, ws, name)
	time.Sleep(3 * time.Second)
	if d := agentDeployment(t, ds, agentNS); d.Generation != before.Generation+1 {
		t.Errorf("want exactly one rollout: generation %d -> %d", before.Generation, d.Generation)
	}
	if _, n := a.Registered(); n != name {
		t.Error("the bump must not make an agent-initiated agent register again")
	}

	// A reinstall with the token's values (helm install after helm
	// uninstall) writes the chart's defaults, GENERATION 0 among them: the
	// agent's own Bundle wins again within a resync, rather than at the
	// next change of the Cluster.
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"fleet-agent","env":[{"name":"GENERATION","value":"0"}]}]}}}}`)
	if err := ds.Client.Patch(t.Context(), agentDeployment(t, ds, agentNS), client.RawPatch(types.StrategicMergePatchType, patch), client.FieldOwner("helm")); err != nil {
		t.Fatal(err)
	}
	if g := envGeneration(agentDeployment(t, ds, agentNS)); g != "0" {
		t.Fatalf("the stand-in reinstall did not take: GENERATION=%q", g)
	}
	testenv.Eventually(t, 90*time.Second, "GENERATION=5 put back by the agent's own Bundle", func() error {
		if g := envGeneration(agentDeployment(t, ds, agentNS)); g != "5" {
			return fmt.Errorf("GENERATION=%q", g)
		}
		return nil
	})
}
