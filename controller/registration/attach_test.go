package registration_test

import (
	"errors"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/internal/tunnel"
)

// TestGrant_AgentMayHoldOnlyItsOwnClustersTunnel: SPEC §6 (cluster access),
// an agent may hold the tunnel of its own Cluster and no other's. The
// upstream API server's check (the grant's Role: get
// proxy.fleet.cattle.io clusters/attach) is asked as the request identity
// itself; fleet-proxy's own mapping is run on what the grant made.
func TestGrant_AgentMayHoldOnlyItsOwnClustersTunnel(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	otherWS := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
	_, secretA := a.register(t, randomID("attach-a-"), nil)
	_, secretB := a.register(t, randomID("attach-b-"), nil)
	clusterA, clusterB := string(secretA.Data[registration.KeyClusterName]), string(secretB.Data[registration.KeyClusterName])
	if clusterA == clusterB {
		t.Fatalf("both registrations got Cluster %s", clusterA)
	}
	agentA := as(t, string(secretA.Data[registration.KeyToken]))
	ctx := t.Context()

	// The tunnel (attach) and the revoked direct tokens (revocations).
	for _, sub := range []string{"attach", "revocations"} {
		may := func(namespace, name string) bool {
			t.Helper()
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: namespace, Verb: "get", Group: registration.ProxyAPIGroup,
					Resource: "clusters", Subresource: sub, Name: name,
				},
			}}
			got, err := agentA.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return got.Status.Allowed
		}
		if !may(ws, clusterA) {
			t.Errorf("the request identity may not get clusters/%s of its own Cluster", sub)
		}
		for _, c := range []struct{ ns, name string }{{ws, clusterB}, {ws, ""}, {otherWS, clusterA}} {
			if may(c.ns, c.name) {
				t.Errorf("the request identity of %s may get clusters/%s of %q in %s", clusterA, sub, c.name, c.ns)
			}
		}
	}

	// fleet-proxy's mapping, on the objects the grant made, once the agent
	// checked in (the Cluster's status names its namespace from then on).
	checkIn(t, secretA)
	checkIn(t, secretB)
	userA := "system:serviceaccount:" + string(secretA.Data[registration.KeyDeploymentNamespace]) + ":" + string(secretA.Data[registration.KeyServiceAccount])
	key, err := tunnel.AuthorizeAttach(ctx, up, userA, "", ws, clusterA)
	if err != nil || key != ws+"/"+clusterA {
		t.Fatalf("mapping the request identity of %s: key %q, %v", clusterA, key, err)
	}
	if key, err := tunnel.AuthorizeAttach(ctx, up, userA, "", ws, clusterB); !errors.Is(err, tunnel.ErrNotAnAgent) {
		t.Errorf("the request identity of %s maps to Cluster %s: key %q, %v", clusterA, clusterB, key, err)
	}
}
