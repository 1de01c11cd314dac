package registration_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// TestAgentStatus_RequestIdentityReportsOnlyItsOwnBundleDeployments: with a
// partitioned rollout (spec.rolloutStrategy) what an agent reports of a
// BundleDeployment decides when a Bundle's change goes on to other
// clusters. An agent reports its own cluster's BundleDeployments and no
// other cluster's: the API server refuses the request identity another
// cluster namespace's BundleDeployment status, whatever the verb.
func TestAgentStatus_RequestIdentityReportsOnlyItsOwnBundleDeployments(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
	_, mine := a.register(t, randomID("bd-mine-"), nil)
	_, theirs := a.register(t, randomID("bd-theirs-"), nil)
	req := as(t, string(mine.Data[registration.KeyToken]))
	ctx := t.Context()

	// One BundleDeployment in each cluster namespace, as the Bundle
	// reconciler writes them.
	bdIn := func(secret *corev1.Secret) client.ObjectKey {
		t.Helper()
		cluster := string(secret.Data[registration.KeyClusterName])
		key := client.ObjectKey{Namespace: names.ClusterNamespace(ws, cluster), Name: "app"}
		testenv.Eventually(t, 30*time.Second, "BundleDeployment "+key.String(), func() error {
			bd := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{
				fleet.BundleLabel: "app", fleet.BundleNamespaceLabel: ws, fleet.ClusterLabel: cluster, fleet.ClusterNamespaceLabel: ws}},
				Spec: fleet.BundleDeploymentSpec{DeploymentID: "s-1:o", StagedDeploymentID: "s-1:o"}}
			if err := up.Create(ctx, bd); err != nil && !apierrors.IsAlreadyExists(err) {
				return err // the namespace comes with the grant
			}
			return nil
		})
		return key
	}
	own, other := bdIn(mine), bdIn(theirs)
	readyPatch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"appliedDeploymentID":"s-1:o","ready":true,"nonModified":true}}`))

	// Its own: reported as the agent does.
	testenv.Eventually(t, 30*time.Second, "the agent reports its own BundleDeployment", func() error {
		bd := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: own.Namespace, Name: own.Name}}
		return req.Status().Patch(ctx, bd, readyPatch)
	})

	// Another cluster's: refused, read or written.
	theirBD := &fleet.BundleDeployment{}
	if err := up.Get(ctx, other, theirBD); err != nil {
		t.Fatal(err)
	}
	attempts := map[string]func() error{
		"get": func() error { return req.Get(ctx, other, &fleet.BundleDeployment{}) },
		"status merge patch": func() error {
			return req.Status().Patch(ctx, &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: other.Namespace, Name: other.Name}}, readyPatch)
		},
		"status update": func() error {
			bd := theirBD.DeepCopy()
			bd.Status.AppliedDeploymentID, bd.Status.Ready, bd.Status.NonModified = "s-1:o", true, true
			return req.Status().Update(ctx, bd)
		},
		"spec update": func() error {
			bd := theirBD.DeepCopy()
			bd.Spec.DeploymentID = "s-2:o"
			return req.Update(ctx, bd)
		},
	}
	for what, attempt := range attempts {
		if err := attempt(); !apierrors.IsForbidden(err) {
			t.Errorf("%s of another cluster's BundleDeployment as the request identity: %v, want 403", what, err)
		}
	}
	got := &fleet.BundleDeployment{}
	if err := up.Get(ctx, other, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Ready || got.Status.AppliedDeploymentID != "" || got.Spec.DeploymentID != "s-1:o" {
		t.Errorf("another cluster's BundleDeployment changed: spec %+v status %+v", got.Spec, got.Status)
	}
	if err := up.Get(ctx, own, got); err != nil {
		t.Fatal(err)
	}
	if !got.Status.Ready || got.Status.AppliedDeploymentID != "s-1:o" {
		t.Errorf("its own report did not land: %+v", got.Status)
	}
}
