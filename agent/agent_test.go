package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/fluxcd/pkg/ssa"

	"github.com/gitops-fleet/fleet/agent"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/renderenv"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/renderer"
)

var (
	env        *controlplane.Env
	ctrl       *controller.Controller
	up         client.Client
	metricsURL string
)

const heartbeat = time.Second

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{Downstreams: 2}}, func(s *testenv.Suite) error {
		env, up = s.Env, s.Env.Upstream.Client
		// The controller's metrics endpoint, scraped by the gauge tests.
		addr, err := renderenv.FreeAddress("127.0.0.1")
		if err != nil {
			return err
		}
		metricsURL = "http://" + addr + "/metrics"
		ctrl, err = controller.New(s.Context(), controller.Options{
			RestConfig: env.Upstream.Config,
			InitialConfig: &config.Config{
				APIServerURL:                 env.Upstream.Config.Host,
				APIServerCA:                  env.Upstream.Config.CAData,
				AgentCheckinInterval:         metav1.Duration{Duration: heartbeat},
				OfflineAfterMissedHeartbeats: 3,
				RequestCredentialTTL:         metav1.Duration{Duration: time.Hour},
				// The render workers are this test binary, built with -race
				// (several times slower) on a shared machine: the large-content
				// test's 5 MB render needs more than the default 30s there.
				BundleRenderTimeout: metav1.Duration{Duration: 3 * time.Minute},
				// Registration tests: no agent Bundles (nothing applies them
				// here, and their pending state would hold Ready back).
				ManageAgent: ptr.To(false),
			},
			MetricsAddress: addr,
			ProbeAddress:   "0",
		})
		if err != nil {
			return err
		}
		s.Go("controller", ctrl.Start)
		return nil
	})
}

// newToken makes a ClusterRegistrationToken and returns its values file.
func newToken(t *testing.T, ws, name string, spec fleet.ClusterRegistrationTokenSpec) []byte {
	t.Helper()
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}, Spec: spec}
	if err := up.Create(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
	var values []byte
	testenv.Eventually(t, 30*time.Second, "token values", func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(tok), tok); err != nil {
			return err
		}
		if tok.Status.SecretName == "" {
			return fmt.Errorf("no secret yet")
		}
		s := &corev1.Secret{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: tok.Status.SecretName}, s); err != nil {
			return err
		}
		values = s.Data["values"]
		return nil
	})
	return values
}

// helmInstall does what `helm install fleet-agent charts/fleet-agent -n ns
// -f values.yaml --set ...` does to the downstream: render the chart with
// the values and create its objects (and the namespace).
func helmInstall(t *testing.T, ds *controlplane.ControlPlane, ns string, values []byte, set map[string]any) {
	t.Helper()
	vals := map[string]any{}
	if err := yaml.Unmarshal(values, &vals); err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		vals[k] = v
	}
	vals["internal"] = map[string]any{"systemNamespace": ns}
	merged, err := yaml.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := renderer.LoadChartDir("../charts/fleet-agent")
	if err != nil {
		t.Fatal(err)
	}
	out, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: "fleet-agent", Namespace: ns, Values: merged})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	nsObj := &unstructured.Unstructured{}
	nsObj.SetAPIVersion("v1")
	nsObj.SetKind("Namespace")
	nsObj.SetName(ns)
	all := append([]*unstructured.Unstructured{nsObj}, objs...)
	if _, err := apply.NewManager(ds.Client).ApplyAllStaged(t.Context(), all, ssa.DefaultApplyOptions()); err != nil {
		t.Fatal(err)
	}
}

type runningAgent struct {
	*agent.Agent
	t      *testing.T
	cancel context.CancelFunc
	run    *testenv.Runner
}

// stop ends the agent and waits for it.
func (r *runningAgent) stop() {
	r.t.Helper()
	r.cancel()
	if err := r.run.Wait(30 * time.Second); err != nil {
		r.t.Error(err)
	}
}

// startAgent runs an agent in namespace ns of ds; with crash, it ends at
// that write.
func startAgent(t *testing.T, ds *controlplane.ControlPlane, ns string, crash *crashPoint) *runningAgent {
	t.Helper()
	g := int64(0)
	ctx, cancel := context.WithCancel(context.Background())
	local := ds.Config
	if crash != nil {
		local = crash.config(local, cancel)
	}
	a, err := agent.New(agent.Options{
		Local: local, Namespace: ns, PodName: "agent-" + ns,
		CheckinInterval: heartbeat, Generation: &g, RegistrationTimeout: 20 * time.Second, ResyncInterval: 2 * time.Second,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &runningAgent{Agent: a, t: t, cancel: cancel, run: testenv.Go(ctx, "agent", a.Run)}
	t.Cleanup(r.stop)
	return r
}

func waitRegistered(t *testing.T, a *runningAgent) (string, string) {
	t.Helper()
	var ns, name string
	testenv.Eventually(t, 30*time.Second, "agent registered", func() error {
		ns, name = a.Registered()
		if name == "" {
			return fmt.Errorf("not registered (ready check: %v)", a.ReadyCheck(nil))
		}
		return nil
	})
	return ns, name
}

func getCluster(t *testing.T, ns, name string) *fleet.Cluster {
	t.Helper()
	c := &fleet.Cluster{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		t.Fatal(err)
	}
	return c
}

func waitReady(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string) *fleet.Cluster {
	t.Helper()
	var c *fleet.Cluster
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("Cluster %s/%s Ready=%s (%s)", ns, name, status, reason), func() error {
		c = getCluster(t, ns, name)
		r := meta.FindStatusCondition(c.Status.Conditions, fleet.ReadyCondition)
		if r == nil || r.Status != status || (reason != "" && r.Reason != reason) {
			return fmt.Errorf("conditions %+v", c.Status.Conditions)
		}
		return nil
	})
	return c
}

func countRegistrations(t *testing.T, ws, clientID string) int {
	t.Helper()
	list := &fleet.ClusterRegistrationList{}
	if err := up.List(t.Context(), list, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range list.Items {
		if r.Spec.ClientID == clientID && r.DeletionTimestamp.IsZero() {
			n++
		}
	}
	return n
}

func localSecret(t *testing.T, ds *controlplane.ControlPlane, ns, name string) (*corev1.Secret, error) {
	t.Helper()
	s := &corev1.Secret{}
	err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, s)
	return s, err
}

func TestAgentInitiated_NewClusterRegistersWithLabelsAndReportsIn(t *testing.T) {
	ds := env.Downstreams[0]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{
		"clientID": "edge-" + ws,
		"labels":   map[string]any{"env": "edge", "fleet.cattle.io/shard-id": "x", "management.cattle.io/evil": "1"},
	})
	boot, err := localSecret(t, ds, agentNS, "fleet-agent-bootstrap")
	if err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, ds, agentNS, nil)
	gotNS, name := waitRegistered(t, a)
	if gotNS != ws || name == "" {
		t.Fatalf("registered as %s/%s", gotNS, name)
	}
	c := waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
	if c.Spec.ClientID != "edge-"+ws {
		t.Errorf("clientID %q", c.Spec.ClientID)
	}
	if c.Labels["env"] != "edge" || c.Labels["fleet.cattle.io/shard-id"] != "" || c.Labels["management.cattle.io/evil"] != "" {
		t.Errorf("labels must be the agent's minus reserved ones: %v", c.Labels)
	}
	if c.Status.Agent.Namespace != agentNS || c.Status.Agent.KubernetesVersion == "" || c.Status.Agent.Generation == nil {
		t.Errorf("heartbeat incomplete: %+v", c.Status.Agent)
	}
	if _, err := localSecret(t, ds, agentNS, "fleet-agent-bootstrap"); !apierrors.IsNotFound(err) {
		t.Errorf("bootstrap Secret not forgotten: %v", err)
	}
	cred, err := localSecret(t, ds, agentNS, "fleet-agent")
	if err != nil || len(cred.Data["kubeconfig"]) == 0 {
		t.Fatalf("no local credential: %v", err)
	}

	// A spent bootstrap Secret written beside the working credential (the
	// one it registered with, as a push retried after the agent registered
	// writes it) is deleted while the agent runs, and the agent keeps its
	// registration.
	spent := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: "fleet-agent-bootstrap"}, Data: boot.Data}
	if err := ds.Client.Create(t.Context(), spent); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the spent bootstrap Secret deleted", func() error {
		if _, err := localSecret(t, ds, agentNS, "fleet-agent-bootstrap"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	after, err := localSecret(t, ds, agentNS, "fleet-agent")
	if err != nil || after.UID != cred.UID || after.ResourceVersion != cred.ResourceVersion {
		t.Errorf("the credential changed: the agent must not register again (%v)", err)
	}
	if n := countRegistrations(t, ws, "edge-"+ws); n != 1 {
		t.Errorf("%d registrations, want the first one only", n)
	}

	// New values installed to register again (docs/operations.md, rotating
	// the upstream CA): their bootstrap Secret stays beside the working
	// credential, and the agent registers with it once the credential is
	// deleted.
	again := newToken(t, ws, "again", fleet.ClusterRegistrationTokenSpec{ClientID: "edge-" + ws})
	helmInstall(t, ds, agentNS, again, map[string]any{"clientID": "edge-" + ws})
	if err := ds.Client.Delete(t.Context(), after); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "registered again with the new values", func() error {
		regs := &fleet.ClusterRegistrationList{}
		if err := up.List(t.Context(), regs, client.InNamespace(ws), client.MatchingLabels{fleet.RegistrationTokenLabel: "again"}); err != nil {
			return err
		}
		if len(regs.Items) != 1 || !regs.Items[0].Status.Granted {
			return fmt.Errorf("%d registrations with token again", len(regs.Items))
		}
		if _, err := localSecret(t, ds, agentNS, "fleet-agent-bootstrap"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("bootstrap Secret not consumed: %v", err)
		}
		return nil
	})
}

func TestAgentInitiated_PredefinedClusterIsMatchedByClientID(t *testing.T) {
	ds := env.Downstreams[1]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	pre := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "my-cluster", Labels: map[string]string{"team": "a"}},
		Spec: fleet.ClusterSpec{ClientID: "predefined-" + ws}}
	if err := up.Create(t.Context(), pre); err != nil {
		t.Fatal(err)
	}
	// A Cluster no agent registered yet takes a token bound to its
	// clientID (a generic token only creates new Clusters).
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{ClientID: "predefined-" + ws})
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": "predefined-" + ws, "labels": map[string]any{"other": "x"}})
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	if name != "my-cluster" {
		t.Fatalf("registered as %q, want the predefined Cluster", name)
	}
	list := &fleet.ClusterList{}
	if err := up.List(t.Context(), list, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d Clusters, want exactly the predefined one", len(list.Items))
	}
	if c := getCluster(t, ws, "my-cluster"); c.Labels["other"] != "" || c.Labels["team"] != "a" {
		t.Errorf("a predefined Cluster keeps its own labels: %v", c.Labels)
	}
}

// updateCluster changes a Cluster, retrying when the controller or an agent
// wrote it in between.
func updateCluster(t *testing.T, ns, name string, mutate func(*fleet.Cluster)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getCluster(t, ns, name)
		mutate(cur)
		return up.Update(t.Context(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}
