package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// The states of fleet_clusters, from the Cluster's Ready condition (which
// the Cluster reconciler keeps current, Offline included: it turns a
// Cluster Offline at the moment its heartbeat is overdue).
const (
	// ClusterReady: Ready=True (the agent checks in, its Bundles are ready).
	ClusterReady = "Ready"
	// ClusterOffline: Ready=False, reason Offline (the agent missed its
	// heartbeats: offlineAfterMissedHeartbeats intervals without one).
	ClusterOffline = "Offline"
	// ClusterWaitCheckIn: Ready=False, reason WaitingForRegistration (no
	// agent has checked in yet).
	ClusterWaitCheckIn = "WaitCheckIn"
	// ClusterNotReady: Ready=False for any other reason (Bundles not ready,
	// the import failed, a paused rollout...).
	ClusterNotReady = "NotReady"
	// ClusterUnknown: no Ready condition yet, or Ready=Unknown (not
	// reconciled yet, or reconciling).
	ClusterUnknown = "Unknown"
)

// ClusterStates are the states fleet_clusters reports, each with a value
// (zero included) for every workspace that has a Cluster.
var ClusterStates = []string{ClusterReady, ClusterNotReady, ClusterOffline, ClusterWaitCheckIn, ClusterUnknown}

// ClusterState is the state of c in fleet_clusters.
func ClusterState(c *fleet.Cluster) string {
	r := meta.FindStatusCondition(c.Status.Conditions, fleet.ReadyCondition)
	switch {
	case r == nil || r.Status == metav1.ConditionUnknown:
		return ClusterUnknown
	case r.Status == metav1.ConditionTrue:
		return ClusterReady
	case r.Reason == fleet.OfflineReason:
		return ClusterOffline
	case r.Reason == fleet.WaitingForRegistrationReason:
		return ClusterWaitCheckIn
	}
	return ClusterNotReady
}

// clusterCollector computes fleet_clusters when scraped, from the reader the
// leading controller gave (its informer cache: no request to the API
// server, no copy of the objects). Without one (a replica that does not
// lead, or not shard 0) it reports nothing, so that the sum over replicas is
// the number of Clusters.
type clusterCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	from client.Reader
}

var clusters = &clusterCollector{desc: prometheus.NewDesc("fleet_clusters",
	"Clusters by workspace and state (Ready, NotReady, Offline, WaitCheckIn, Unknown: from the Cluster's Ready condition; see docs/operations.md \"Metrics\"). Reported by the leading controller (shard 0).",
	[]string{"workspace", "state"}, nil)}

// ReportClusters makes fleet_clusters count the Clusters r reads, until the
// returned func is called.
func ReportClusters(r client.Reader) (stop func()) {
	clusters.mu.Lock()
	clusters.from = r
	clusters.mu.Unlock()
	return func() {
		clusters.mu.Lock()
		defer clusters.mu.Unlock()
		if clusters.from == r {
			clusters.from = nil
		}
	}
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	r := c.from
	c.mu.Unlock()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list := &fleet.ClusterList{}
	// Read only: the cache's objects are not copied for the count.
	if err := r.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	counts := map[string]map[string]float64{}
	for i := range list.Items {
		cl := &list.Items[i]
		ws := counts[cl.Namespace]
		if ws == nil {
			ws = map[string]float64{}
			counts[cl.Namespace] = ws
		}
		ws[ClusterState(cl)]++
	}
	for ws, byState := range counts {
		for _, state := range ClusterStates {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, byState[state], ws, state)
		}
	}
}
