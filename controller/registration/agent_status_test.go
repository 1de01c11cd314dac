package registration_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// TestAgentStatus_RequestIdentityWritesOnlyItsHeartbeat: SPEC §6, an agent
// may write status.agent of its Cluster and no other status field. The
// reproduced attack was a merge patch of status.namespace (to another
// cluster's namespace, or kube-system) and of agentDeployedGeneration: the
// API server itself must refuse both, whatever verb is used.
func TestAgentStatus_RequestIdentityWritesOnlyItsHeartbeat(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
	_, secret := a.register(t, randomID("status-"), nil)
	clusterName := string(secret.Data[registration.KeyClusterName])
	req := as(t, string(secret.Data[registration.KeyToken]))
	ctx := t.Context()
	key := client.ObjectKey{Namespace: ws, Name: clusterName}
	patch := func(body string) error {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: clusterName}}
		return req.Status().Patch(ctx, c, client.RawPatch(types.MergePatchType, []byte(body)))
	}
	now := time.Now().UTC().Format(time.RFC3339)

	// The heartbeat, as the agent sends it (a merge patch of status.agent;
	// the agent never sends a whole status).
	if err := patch(`{"status":{"agent":{"lastSeen":"` + now + `","namespace":"cattle-fleet-system","nodeCount":3}}}`); err != nil {
		t.Fatalf("heartbeat refused: %v", err)
	}

	// The Cluster reconciler writes its part of the status before the
	// patches below try to change it: at once after that first heartbeat
	// (without one, only after cluster.FirstCheckInGrace).
	testenv.Eventually(t, 30*time.Second, "the controller's status on the Cluster", func() error {
		c := &fleet.Cluster{}
		if err := up.Get(ctx, key, c); err != nil {
			return err
		}
		if c.Status.Namespace == "" || len(c.Status.Conditions) == 0 {
			return fmt.Errorf("status %+v", c.Status)
		}
		return nil
	})

	other := names.ClusterNamespace(ws, "someone-else")
	forbidden := map[string]func() error{
		"status.namespace to another cluster's namespace": func() error {
			return patch(`{"status":{"namespace":"` + other + `"}}`)
		},
		"status.namespace to kube-system (reproduced on real clusters)": func() error {
			return patch(`{"status":{"namespace":"kube-system"}}`)
		},
		"status.agentDeployedGeneration": func() error { return patch(`{"status":{"agentDeployedGeneration":7}}`) },
		"status.agentValuesHash":         func() error { return patch(`{"status":{"agentValuesHash":"x"}}`) },
		"status.kubeConfigServerHash":    func() error { return patch(`{"status":{"kubeConfigServerHash":"x"}}`) },
		"status.conditions": func() error {
			return patch(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Faked","message":"","lastTransitionTime":"` + now + `"}]}}`)
		},
		"the heartbeat together with status.display": func() error {
			return patch(`{"status":{"agent":{"lastSeen":"` + now + `"},"display":{"readyBundles":"9/9"}}}`)
		},
		"removing status.namespace": func() error { return patch(`{"status":{"namespace":null}}`) },
		"an update that changes status.namespace": func() error {
			// The controller writes the status too: retry on conflicts.
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				c := &fleet.Cluster{}
				if err := req.Get(ctx, key, c); err != nil {
					return fmt.Errorf("get: %w", err)
				}
				c.Status.Namespace = "kube-system"
				return req.Status().Update(ctx, c)
			})
		},
	}
	for what, do := range forbidden {
		err := do()
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("request identity may change %s: want the API server to refuse, got %v", what, err)
			continue
		}
		if !strings.Contains(err.Error(), "may only write status.agent") {
			t.Errorf("%s: refused, but not by the status policy: %v", what, err)
		}
	}

	got := &fleet.Cluster{}
	if err := up.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Namespace != names.ClusterNamespace(ws, clusterName) || got.Status.AgentDeployedGeneration != nil || got.Status.AgentValuesHash != "" {
		t.Errorf("the controller's status fields changed: namespace %q, deployedGeneration %v, valuesHash %q",
			got.Status.Namespace, got.Status.AgentDeployedGeneration, got.Status.AgentValuesHash)
	}
	// The controller itself is not restricted by the policy.
	if err := up.Status().Patch(ctx, got, client.RawPatch(types.MergePatchType, []byte(`{"status":{"display":{"state":"x"}}}`))); err != nil {
		t.Errorf("an admin's status patch was refused: %v", err)
	}
}
