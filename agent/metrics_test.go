package agent_test

import (
	"bufio"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/dev/testenv"
)

var clustersLine = regexp.MustCompile(`^fleet_clusters\{state="([^"]*)",workspace="([^"]*)"\} (\S+)$`)

// scrapeClusters reads fleet_clusters of workspace ws from the controller's
// metrics endpoint: state -> value.
func scrapeClusters(t *testing.T, ws string) (map[string]float64, error) {
	t.Helper()
	resp, err := http.Get(metricsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", metricsURL, resp.Status)
	}
	got := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := clustersLine.FindStringSubmatch(sc.Text()); m != nil && m[2] == ws {
			v, err := strconv.ParseFloat(m[3], 64)
			if err != nil {
				return nil, err
			}
			got[m[1]] = v
		}
	}
	return got, sc.Err()
}

func waitClusters(t *testing.T, ws string, want map[string]float64) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("fleet_clusters of %s = %v", ws, want), func() error {
		got, err := scrapeClusters(t, ws)
		if err != nil {
			return err
		}
		for _, state := range []string{"Ready", "NotReady", "Offline", "WaitCheckIn", "Unknown"} {
			if got[state] != want[state] {
				return fmt.Errorf("scraped %v", got)
			}
			if _, ok := got[state]; !ok {
				return fmt.Errorf("no series for state %s (a zero must be reported): %v", state, got)
			}
		}
		return nil
	})
}

// TestMetrics_ClustersGaugeFollowsTheClustersStates: fleet_clusters, scraped
// from the controller's metrics endpoint, counts a workspace's Clusters by
// state: one whose agent checks in is Ready, one no agent registered for
// is WaitCheckIn; when the agent stops, its Cluster turns Offline.
func TestMetrics_ClustersGaugeFollowsTheClustersStates(t *testing.T) {
	ds := env.Downstreams[0]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	if err := up.Create(t.Context(), &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "never-registered"}, Spec: fleet.ClusterSpec{ClientID: "nobody-" + ws}}); err != nil {
		t.Fatal(err)
	}
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": "gauge-" + ws})
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
	waitClusters(t, ws, map[string]float64{"Ready": 1, "WaitCheckIn": 1})

	a.stop()
	waitReady(t, ws, name, metav1.ConditionFalse, fleet.OfflineReason)
	waitClusters(t, ws, map[string]float64{"Offline": 1, "WaitCheckIn": 1})
}
