package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// TestBundle_UnsupportedOptionIsStalledAndNotDeployed: a Bundle that sets
// an option fleet does not do yet (here a target's overwrites) is
// Ready=False and Stalled with reason UnsupportedOption and the option's
// path, and gets no BundleDeployment; without the option it deploys and
// the condition clears.
func TestBundle_UnsupportedOptionIsStalledAndNotDeployed(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-unsupported-")
	newCluster(t, ws, "c", map[string]string{"env": "prod"})
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "remote"}, Spec: fleet.BundleSpec{
		BundleDeploymentOptions: fleet.BundleDeploymentOptions{IgnoreOptions: &fleet.IgnoreOptions{}, CorrectDrift: &fleet.CorrectDrift{}},
		Resources:               []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"}},
		Targets: []fleet.BundleTarget{
			{Name: "elsewhere", ClusterName: "other"},
			{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
				BundleDeploymentOptions: fleet.BundleDeploymentOptions{IgnoreOptions: &fleet.IgnoreOptions{}, Overwrites: []fleet.OverwrittenResource{{Kind: "ConfigMap", Name: "x"}}}},
		},
	}}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	const want = "spec.targets[1].overwrites: taking resources over from another Bundle is not supported yet"
	testenv.Eventually(t, 30*time.Second, "Stalled UnsupportedOption", func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		s := meta.FindStatusCondition(b.Status.Conditions, fleet.StalledCondition)
		r := meta.FindStatusCondition(b.Status.Conditions, fleet.ReadyCondition)
		if s == nil || s.Status != metav1.ConditionTrue || s.Reason != fleet.UnsupportedOptionReason || !strings.Contains(s.Message, want) ||
			r == nil || r.Status != metav1.ConditionFalse || s.ObservedGeneration != b.Generation {
			return fmt.Errorf("conditions %+v", b.Status.Conditions)
		}
		return nil
	})
	// The reconciler stalls before it writes any BundleDeployment.
	if got := deployedTo(t, ws, "remote"); len(got) != 0 {
		t.Fatalf("a Bundle with an unsupported option was deployed to %v", got)
	}

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Spec.Targets[1].Overwrites = nil
		return up.Update(t.Context(), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, ws, "remote", "c")
	testenv.Eventually(t, 30*time.Second, "UnsupportedOption cleared", func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if s := meta.FindStatusCondition(b.Status.Conditions, fleet.StalledCondition); s != nil && s.Status == metav1.ConditionTrue {
			return fmt.Errorf("still stalled: %+v", s)
		}
		return nil
	})
}
