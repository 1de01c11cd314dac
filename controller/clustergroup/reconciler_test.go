package clustergroup

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

func TestComputeStatus(t *testing.T) {
	cluster := func(name, env string, ready bool, bundlesReady, bundles int) fleet.Cluster {
		c := fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"env": env}}}
		s := metav1.ConditionFalse
		if ready {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: fleet.ReadyCondition, Status: s, Reason: "x"})
		c.Status.Summary = fleet.BundleSummary{Ready: bundlesReady, DesiredReady: bundles, NotReady: bundles - bundlesReady}
		return c
	}
	g := &fleet.ClusterGroup{Spec: fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}
	err := computeStatus(g, []fleet.Cluster{
		cluster("p1", "prod", true, 2, 2), cluster("p2", "prod", false, 1, 2), cluster("d1", "dev", false, 0, 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	st := g.Status
	if st.ClusterCount != 2 || st.NonReadyClusterCount != 1 || len(st.NonReadyClusters) != 1 || st.NonReadyClusters[0] != "p2" ||
		st.Display.ReadyClusters != "1/2" || st.Display.ReadyBundles != "3/4" {
		t.Errorf("status %+v", st)
	}
	if meta.IsStatusConditionTrue(st.Conditions, fleet.ReadyCondition) {
		t.Error("Ready with a non-ready cluster")
	}
	none := &fleet.ClusterGroup{}
	_ = computeStatus(none, []fleet.Cluster{cluster("p1", "prod", true, 1, 1)})
	if none.Status.ClusterCount != 0 {
		t.Error("a group without a selector selects nothing")
	}
}
