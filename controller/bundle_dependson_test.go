package controller_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
)

// TestBundle_DeploymentCarriesTheBundlesLabelsAndDependsOn: the agent
// checks dependsOn on its cluster against the labels of the cluster
// namespace's BundleDeployments, so a BundleDeployment carries its Bundle's
// labels (as Fleet: without kubectl.kubernetes.io/ and other *cattle.io/
// than fleet.cattle.io/ ones) and its dependsOn, and follows both. The
// labels the controller owns (Bundle name and workspace, Cluster name and
// namespace, managed, agent-bundle) cannot be set through the Bundle's: a
// Bundle that carries them gets the controller's values.
func TestBundle_DeploymentCarriesTheBundlesLabelsAndDependsOn(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-deplabels-")
	newCluster(t, ws, "c1", map[string]string{"env": "prod"})
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app", Labels: map[string]string{
			"tier":                         "web",
			"fleet.cattle.io/repo-name":    "repo",
			"management.cattle.io/project": "p-1",
			"kubectl.kubernetes.io/x":      "y",
			fleet.ClusterLabel:             "other",
			fleet.ClusterNamespaceLabel:    "other-ns",
			fleet.BundleLabel:              "db",
			fleet.BundleNamespaceLabel:     "other-ws",
			fleet.AgentBundleLabel:         "true",
			fleet.ManagedLabel:             "false",
		}},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: "app", IgnoreOptions: &fleet.IgnoreOptions{}, CorrectDrift: &fleet.CorrectDrift{}},
			DependsOn: []fleet.BundleRef{
				{Name: "db", AcceptedStates: []fleet.BundleState{fleet.Ready, fleet.Modified}},
				{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "cache"}}},
			},
			Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n"}},
			Targets:   []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
		},
	}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: names.ClusterNamespace(ws, "c1"), Name: "app"}
	wantLabels := map[string]string{
		"tier": "web", "fleet.cattle.io/repo-name": "repo",
		fleet.BundleLabel: "app", fleet.BundleNamespaceLabel: ws, fleet.ClusterLabel: "c1", fleet.ClusterNamespaceLabel: ws, fleet.ManagedLabel: "true",
	}
	waitBD := func(what string, wantLabels map[string]string, wantDeps []fleet.BundleRef) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, what, func() error {
			bd := &fleet.BundleDeployment{}
			if err := up.Get(t.Context(), key, bd); err != nil {
				return err
			}
			if d := cmp.Diff(wantLabels, bd.Labels); d != "" {
				return fmt.Errorf("labels (-want +got):\n%s", d)
			}
			if d := cmp.Diff(wantDeps, bd.Spec.DependsOn); d != "" {
				return fmt.Errorf("dependsOn (-want +got):\n%s", d)
			}
			return nil
		})
	}
	waitBD("the BundleDeployment with the Bundle's labels and dependsOn", wantLabels, b.Spec.DependsOn)

	// Labels and dependsOn change: the BundleDeployment follows, and a
	// label that left the Bundle leaves it.
	updateBundle(t, b, func(b *fleet.Bundle) {
		b.Labels["tier"] = "api"
		delete(b.Labels, "fleet.cattle.io/repo-name")
		b.Spec.DependsOn = b.Spec.DependsOn[:1]
	})
	wantLabels["tier"] = "api"
	delete(wantLabels, "fleet.cattle.io/repo-name")
	waitBD("the BundleDeployment follows", wantLabels, b.Spec.DependsOn[:1])
}
