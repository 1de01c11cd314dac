package controller_test

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// A GitRepo turns Ready when its Bundles' BundleDeployments are deployed
// and ready (the source component's cache keeps what their state is
// computed from), and not before.
func TestGitRepo_ReadyWhenItsBundleDeploymentsAre(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	clusterNS := testenv.Namespace(t, c, "cluster")
	srv := newServer(t, "git", "s3cret")
	srv.commit(map[string]string{"a/cm.yaml": configMap("a", "1"), "a/fleet.yaml": "defaultNamespace: a\n"})
	basicAuth(t, ns, "git-auth", "git", "s3cret")
	g := gitRepo(t, ns, "ready", srv.url(), func(g *fleet.GitRepo) {
		g.Spec.ClientSecretName = "git-auth"
		g.Spec.Paths = []string{"a"}
	})
	testenv.Eventually(t, timeout, "the Bundle written", func() error {
		if _, ok := bundles(t, g)["ready-a"]; !ok {
			return fmt.Errorf("no Bundle ready-a")
		}
		return nil
	})

	// What the fleet controller would make for one cluster: a
	// BundleDeployment labelled with its Bundle and GitRepo, not yet applied.
	bd := &fleet.BundleDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: clusterNS, Name: "ready-a", Labels: map[string]string{
			fleet.BundleLabel: "ready-a", fleet.BundleNamespaceLabel: ns, fleet.RepoLabel: "ready",
		}},
		Spec: fleet.BundleDeploymentSpec{DeploymentID: "s-1:abc"},
	}
	if err := c.Create(context.Background(), bd); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, "the GitRepo not Ready while its BundleDeployment is not applied", func() error {
		r := getRepo(t, g)
		if cond := condition(r, "Ready"); cond.Status != metav1.ConditionFalse || r.Status.Summary.WaitApplied != 1 {
			return fmt.Errorf("Ready %s %s %q, summary %+v", cond.Status, cond.Reason, cond.Message, r.Status.Summary)
		}
		return nil
	})

	bd.Status = fleet.BundleDeploymentStatus{AppliedDeploymentID: "s-1:abc", Ready: true, NonModified: true}
	if err := c.Status().Update(context.Background(), bd); err != nil {
		t.Fatal(err)
	}
	// And the Bundle's status, as the controller writes it.
	b := bundles(t, g)["ready-a"]
	b.Status.ObservedGeneration = b.Generation
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: fleet.ReadyCondition, Status: metav1.ConditionTrue,
		Reason: "Succeeded", Message: "ready", ObservedGeneration: b.Generation})
	if err := c.Status().Update(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, "the GitRepo Ready once its BundleDeployment is", func() error {
		r := getRepo(t, g)
		if cond := condition(r, "Ready"); cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready %s %s %q, summary %+v", cond.Status, cond.Reason, cond.Message, r.Status.Summary)
		}
		if r.Status.Summary.Ready != 1 {
			return fmt.Errorf("summary %+v", r.Status.Summary)
		}
		return nil
	})
}
