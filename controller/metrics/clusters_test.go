package metrics_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/metrics"
)

// TestClusterState: the state fleet_clusters counts a Cluster in, from its
// Ready condition, as docs/operations.md "Metrics" defines it.
func TestClusterState(t *testing.T) {
	for _, tc := range []struct {
		ready *metav1.Condition
		want  string
	}{
		{nil, metrics.ClusterUnknown},
		{&metav1.Condition{Status: metav1.ConditionUnknown, Reason: "Reconciling"}, metrics.ClusterUnknown},
		{&metav1.Condition{Status: metav1.ConditionTrue, Reason: fleet.AgentHeartbeatReason}, metrics.ClusterReady},
		{&metav1.Condition{Status: metav1.ConditionFalse, Reason: fleet.OfflineReason}, metrics.ClusterOffline},
		{&metav1.Condition{Status: metav1.ConditionFalse, Reason: fleet.WaitingForRegistrationReason}, metrics.ClusterWaitCheckIn},
		{&metav1.Condition{Status: metav1.ConditionFalse, Reason: fleet.BundleDeploymentsNotReadyReason}, metrics.ClusterNotReady},
		{&metav1.Condition{Status: metav1.ConditionFalse, Reason: fleet.DownstreamUnreachableReason}, metrics.ClusterNotReady},
	} {
		c := &fleet.Cluster{}
		if tc.ready != nil {
			r := *tc.ready
			r.Type = fleet.ReadyCondition
			c.Status.Conditions = []metav1.Condition{r}
		}
		if got := metrics.ClusterState(c); got != tc.want {
			t.Errorf("Ready %+v: state %s, want %s", tc.ready, got, tc.want)
		}
	}
}
