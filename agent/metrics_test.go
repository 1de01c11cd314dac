package agent_test

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
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
	checkKubectlColumns(t, ws, name)

	a.stop()
	waitReady(t, ws, name, metav1.ConditionFalse, fleet.OfflineReason)
	waitClusters(t, ws, map[string]float64{"Offline": 1, "WaitCheckIn": 1})
}

// checkKubectlColumns: `kubectl get fc` (the short name, which Cluster API's
// clusters do not share) lists the workspace's Clusters with READY, AGE and
// LAST-SEEN as an age, beside Fleet's columns; every kind's short name
// resolves.
func checkKubectlColumns(t *testing.T, ws, readyCluster string) {
	t.Helper()
	bin := os.Getenv("FLEET_BIN_DIR")
	if bin == "" {
		bin = "../bin"
	}
	kc, err := controlplane.KubeconfigFor(env.Upstream.Config, "upstream")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", path}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := kubectl("get", "fc", "-n", ws)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	header := strings.Fields(lines[0])
	for _, col := range []string{"NAME", "BUNDLES-READY", "NODES-READY", "SAMPLE-NODE", "LAST-SEEN", "CONNECTED", "READY", "STATUS", "AGE"} {
		if !slices.Contains(header, col) {
			t.Errorf("kubectl get fc: no column %s in %q", col, lines[0])
		}
	}
	// kubectl aligns columns: a value starts where its header does.
	starts := map[string]int{}
	for _, m := range regexp.MustCompile(`\S+`).FindAllStringIndex(lines[0], -1) {
		starts[lines[0][m[0]:m[1]]] = m[0]
	}
	cell := func(line, col string) string {
		i, end := starts[col], len(line)
		for _, j := range starts {
			if j > i && j < end {
				end = j
			}
		}
		if i >= len(line) {
			return ""
		}
		return strings.TrimSpace(line[i:min(end, len(line))])
	}
	found := false
	for _, l := range lines[1:] {
		if strings.Fields(l)[0] != readyCluster {
			continue
		}
		found = true
		// READY True; LAST-SEEN and AGE ages such as 3s, not timestamps.
		age := regexp.MustCompile(`^\d+(s|m)`)
		if cell(l, "READY") != "True" || !age.MatchString(cell(l, "LAST-SEEN")) || !age.MatchString(cell(l, "AGE")) {
			t.Errorf("READY %q, LAST-SEEN %q, AGE %q in\n%s", cell(l, "READY"), cell(l, "LAST-SEEN"), cell(l, "AGE"), out)
		}
	}
	if !found {
		t.Errorf("no row for %s:\n%s", readyCluster, out)
	}
	for _, short := range []string{"fc", "fleetcluster", "fb", "fleetbundle", "bd", "cg", "creg", "crt", "ar"} {
		out := kubectl("get", short, "-A")
		if !strings.Contains(out, "AGE") && !strings.Contains(out, "No resources found") {
			t.Errorf("kubectl get %s -A shows no AGE column:\n%s", short, out)
		}
	}
}
