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
	"github.com/gitops-fleet/fleet/internal/chartpath"
)

// TestBundle_RemoteChartRendersTheEmbeddedCopy: a Bundle naming a chart in
// a repository (helm.repo, helm.version) without the chart's files is
// Stalled with reason RemoteResourceRefused and a message naming the chart
// (the controller fetches nothing and deploys nothing); once the copy the
// GitRepo source writes is in its resources (Fleet's .chart/<sha256>/
// layout) it deploys that chart, with helm.repo and helm.version kept.
func TestBundle_RemoteChartRendersTheEmbeddedCopy(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-remotechart-")
	newCluster(t, ws, "c", map[string]string{"env": "prod"})
	h := &fleet.HelmOptions{Chart: "web", Repo: "https://charts.example", Version: "^0.1.0", Values: &fleet.GenericMap{Data: map[string]any{"replicas": 3}}}
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "remote"}, Spec: fleet.BundleSpec{
		BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: "web", Helm: h},
		Targets:                 []fleet.BundleTarget{{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
	}}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	const want = `helm: chart "web" version "^0.1.0" from repo "https://charts.example" is not in the Bundle`
	testenv.Eventually(t, 30*time.Second, "Stalled RemoteResourceRefused", func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		s := meta.FindStatusCondition(b.Status.Conditions, fleet.StalledCondition)
		if s == nil || s.Status != metav1.ConditionTrue || s.Reason != fleet.RemoteResourceRefusedReason || !strings.Contains(s.Message, want) {
			return fmt.Errorf("conditions %+v", b.Status.Conditions)
		}
		return nil
	})
	if got := deployedTo(t, ws, "remote"); len(got) != 0 {
		t.Fatalf("deployed to %v without the chart", got)
	}

	dir := chartpath.Dir(h) + "/web/"
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Spec.Resources = []fleet.BundleResource{
			{Name: dir + "Chart.yaml", Content: webChart},
			{Name: dir + "values.yaml", Content: "replicas: 1\n"},
			{Name: dir + "templates/cm.yaml", Content: webTemplate},
		}
		return up.Update(t.Context(), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, ws, "remote", "c")
	if got := content(t, ws, "c", "remote"); !strings.Contains(got, "name: remote-settings") || !strings.Contains(got, `replicas: "3"`) {
		t.Errorf("deployed:\n%s", got)
	}
	if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
		t.Fatal(err)
	}
	if b.Spec.Helm.Repo != h.Repo || b.Spec.Helm.Version != h.Version {
		t.Errorf("helm options changed: %+v", b.Spec.Helm)
	}
}
