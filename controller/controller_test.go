package controller_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/renderenv"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/renderservice"
)

var (
	env  *controlplane.Env
	ctrl *controller.Controller
	up   client.Client
	// controllerIdentity is the controller's ServiceAccount.
	controllerIdentity *rest.Config
	// logs is the controller's log, to prove what never reaches it.
	logs *testenv.Logs

	// The renderer the controller renders Bundles in: its address, its
	// directory and the running process (replaced when a test restarts it).
	rendererAddr    string
	rendererDir     string
	rendererProcess atomic.Pointer[renderenv.Renderer]
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{Downstreams: 2}, CaptureLogs: true}, func(s *testenv.Suite) error {
		env, up, logs = s.Env, s.Env.Upstream.Client, s.Logs
		// The controller runs with exactly the rights charts/fleet gives it.
		identity, err := env.Upstream.FleetControllerIdentity(s.Context(), config.DefaultSystemNamespace)
		if err != nil {
			return err
		}
		controllerIdentity = identity
		// Bundles render in the renderer, a process of its own, as the
		// chart installs it: the controller makes its credentials' Secret,
		// the renderer starts from its files.
		if rendererAddr, err = renderenv.FreeAddress("127.0.0.1"); err != nil {
			return err
		}
		if rendererDir, err = os.MkdirTemp("", "fleet-controller-renderer-"); err != nil {
			return err
		}
		ctrl, err = controller.New(s.Context(), controller.Options{
			RestConfig: identity,
			InitialConfig: &config.Config{
				APIServerURL: "https://upstream.example.com:6443", APIServerCA: []byte("upstream-ca"),
				// The local cluster has a suite of its own (controller/bootstrap).
				Bootstrap: config.Bootstrap{Enabled: ptr.To(false)},
			},
			MetricsAddress: "0",
			ProbeAddress:   "0",
			RendererURL:    "https://" + rendererAddr,
		})
		if err != nil {
			return err
		}
		s.Go("controller", ctrl.Start)
		r, err := renderenv.StartFromSecret(s.Context(), up, config.DefaultSystemNamespace, renderservice.SecretName, rendererAddr, renderenv.Options{Dir: rendererDir})
		if err != nil {
			return err
		}
		rendererProcess.Store(r)
		s.Go("renderer", func(ctx context.Context) error {
			<-ctx.Done()
			if r := rendererProcess.Load(); r != nil {
				_ = r.Stop()
			}
			return os.RemoveAll(rendererDir)
		})
		return nil
	})
}

// managerCluster commits a Cluster and its kubeconfig Secret for a
// downstream, with an agent namespace of its own so tests sharing a
// downstream do not meet.
func managerCluster(t *testing.T, ds *controlplane.ControlPlane, mutate func(*fleet.Cluster)) *fleet.Cluster {
	t.Helper()
	ws := testenv.Namespace(t, up, "fleet-ws-")
	secret := ds.KubeconfigSecret(ws, "kc")
	if err := up.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	c := &fleet.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "c1"},
		Spec:       fleet.ClusterSpec{KubeConfigSecret: "kc", AgentNamespace: "agent-" + ws},
	}
	if mutate != nil {
		mutate(c)
	}
	if err := up.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func getCluster(t *testing.T, c *fleet.Cluster) *fleet.Cluster {
	t.Helper()
	got := &fleet.Cluster{}
	if err := up.Get(t.Context(), client.ObjectKeyFromObject(c), got); err != nil {
		t.Fatal(err)
	}
	return got
}

func waitCondition(t *testing.T, c *fleet.Cluster, condType string, status metav1.ConditionStatus, reason string) *fleet.Cluster {
	t.Helper()
	var got *fleet.Cluster
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%s=%s reason %s", condType, status, reason), func() error {
		got = getCluster(t, c)
		cond := meta.FindStatusCondition(got.Status.Conditions, condType)
		if cond == nil || cond.Status != status || (reason != "" && cond.Reason != reason) {
			return fmt.Errorf("conditions: %+v", got.Status.Conditions)
		}
		return nil
	})
	return got
}

func waitImported(t *testing.T, c *fleet.Cluster, generation int64) *fleet.Cluster {
	t.Helper()
	var got *fleet.Cluster
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("agent deployed at generation %d", generation), func() error {
		got = getCluster(t, c)
		cond := meta.FindStatusCondition(got.Status.Conditions, fleet.ImportedCondition)
		if got.Status.AgentDeployedGeneration == nil || *got.Status.AgentDeployedGeneration != generation || cond == nil || cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("status: %+v", got.Status)
		}
		return nil
	})
	return got
}

func agentDeployment(t *testing.T, ds *controlplane.ControlPlane, ns string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "fleet-agent"}, d); err != nil {
		t.Fatalf("agent Deployment in %s: %v", ns, err)
	}
	return d
}

func envValue(d *appsv1.Deployment, name string) string {
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// snapshot returns the resourceVersions of every object in a namespace
// downstream (and the namespace itself).
func snapshot(t *testing.T, ds *controlplane.ControlPlane, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	lists := []client.ObjectList{&corev1.SecretList{}, &corev1.ConfigMapList{}, &corev1.ServiceAccountList{}, &appsv1.DeploymentList{}}
	for _, l := range lists {
		if err := ds.Client.List(t.Context(), l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(l)
		for _, it := range items {
			o := it.(client.Object)
			out[fmt.Sprintf("%T/%s", o, o.GetName())] = o.GetResourceVersion()
		}
	}
	n := &corev1.Namespace{}
	if err := ds.Client.Get(t.Context(), client.ObjectKey{Name: ns}, n); err != nil {
		t.Fatal(err)
	}
	out["namespace"] = n.ResourceVersion
	return out
}

// waitEvents waits (events are sent asynchronously) until the Cluster has at
// least want events of reason, and returns how many it has then.
func waitEvents(t *testing.T, c *fleet.Cluster, reason string, want int) int {
	t.Helper()
	n := 0
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d %s event(s)", want, reason), func() error {
		if n = countEvents(t, c, reason); n < want {
			return fmt.Errorf("%d %s events", n, reason)
		}
		return nil
	})
	return n
}

func countEvents(t *testing.T, c *fleet.Cluster, reason string) int {
	t.Helper()
	list := &corev1.EventList{}
	if err := up.List(t.Context(), list, client.InNamespace(c.Namespace)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Reason == reason && e.InvolvedObject.Name == c.Name {
			n += max(1, int(e.Count))
		}
	}
	return n
}

func TestImport_DeploysTheAgentWithServerSideApply(t *testing.T) {
	ds := env.Downstreams[0]
	c := managerCluster(t, ds, nil)
	got := waitImported(t, c, 0)
	agentNS := c.Spec.AgentNamespace

	if got.Spec.ClientID == "" {
		t.Error("no clientID generated")
	}
	if got.Status.APIServerURL != "https://upstream.example.com:6443" || got.Status.APIServerCAHash == "" || got.Status.AgentTLSMode != "system-store" {
		t.Errorf("status does not record what was given: %+v", got.Status)
	}
	ns := &corev1.Namespace{}
	if err := up.Get(t.Context(), client.ObjectKey{Name: got.Status.Namespace}, ns); err != nil {
		t.Fatalf("cluster namespace: %v", err)
	}
	if ns.Annotations[fleet.ClusterAnnotation] != c.Name || ns.Annotations[fleet.ClusterNamespaceAnnotation] != c.Namespace {
		t.Errorf("cluster namespace does not point back: %v", ns.Annotations)
	}

	d := agentDeployment(t, ds, agentNS)
	owners := map[string]bool{}
	for _, mf := range d.ManagedFields {
		owners[mf.Manager+"/"+string(mf.Operation)] = true
	}
	if !owners["fleet/Apply"] {
		t.Errorf("agent Deployment not server-side applied by field manager fleet: %v", owners)
	}
	if envValue(d, "GENERATION") != "0" {
		t.Errorf("GENERATION %q", envValue(d, "GENERATION"))
	}

	boot := &corev1.Secret{}
	if err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: agentNS, Name: "fleet-agent-bootstrap"}, boot); err != nil {
		t.Fatal(err)
	}
	token := string(boot.Data["token"])
	if token == "" || strings.HasPrefix(token, "<fleet:") {
		t.Fatalf("bootstrap Secret carries no real token: %q", token)
	}
	if string(boot.Data["apiServerURL"]) != "https://upstream.example.com:6443" || string(boot.Data["tokenName"]) != "import-token-c1" ||
		string(boot.Data["clusterNamespace"]) != c.Namespace {
		t.Errorf("bootstrap Secret: %v", boot.Data)
	}

	bundle := &fleet.Bundle{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: "fleet-agent-c1"}, bundle); err != nil {
		t.Fatalf("agent Bundle: %v", err)
	}
	raw := fmt.Sprintf("%+v", bundle.Spec)
	if strings.Contains(raw, token) || strings.Contains(raw, "fleet-agent-bootstrap") {
		t.Error("the agent Bundle carries the bootstrap credential")
	}
	if !strings.Contains(raw, "kind: Deployment") || len(bundle.Spec.Targets) != 1 || bundle.Spec.Targets[0].ClusterName != c.Name {
		t.Errorf("agent Bundle does not hold the agent for its cluster: %s", raw)
	}
	if n := waitEvents(t, c, "AgentDeployed", 1); n != 1 {
		t.Errorf("AgentDeployed events: %d", n)
	}
}

func TestImport_RedeploysOnceWhenGenerationBumped(t *testing.T) {
	ds := env.Downstreams[0]
	c := managerCluster(t, ds, nil)
	waitImported(t, c, 0)
	agentNS := c.Spec.AgentNamespace
	// The agent would have registered by now: its credential is what a
	// redeploy must remove.
	cred := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: "fleet-agent"}, StringData: map[string]string{"kubeconfig": "x"}}
	if err := ds.Client.Create(t.Context(), cred); err != nil {
		t.Fatal(err)
	}
	before := agentDeployment(t, ds, agentNS).Generation

	updateCluster(t, c, func(cur *fleet.Cluster) {
		cur.Spec.RedeployAgentGeneration = 1
	})
	waitImported(t, c, 1)
	d := agentDeployment(t, ds, agentNS)
	if envValue(d, "GENERATION") != "1" || d.Generation != before+1 {
		t.Errorf("want exactly one rollout with GENERATION=1; generation %d -> %d, env %q", before, d.Generation, envValue(d, "GENERATION"))
	}
	if err := ds.Client.Get(t.Context(), client.ObjectKeyFromObject(cred), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("old agent credential not removed: %v", err)
	}
	time.Sleep(2 * time.Second) // any extra redeploy would show by now
	if n := waitEvents(t, c, "AgentRedeployed", 1); n != 1 {
		t.Errorf("AgentRedeployed events: %d, want 1", n)
	}
	if d2 := agentDeployment(t, ds, agentNS); d2.Generation != d.Generation {
		t.Errorf("redeployed more than once: generation %d -> %d", d.Generation, d2.Generation)
	}
}

func TestImport_RedeploysOnceWhenAnAgentSettingChanges(t *testing.T) {
	ds := env.Downstreams[1]
	c := managerCluster(t, ds, nil)
	waitImported(t, c, 0)
	before := agentDeployment(t, ds, c.Spec.AgentNamespace).Generation
	updateCluster(t, c, func(cur *fleet.Cluster) {
		cur.Spec.AgentEnvVars = []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "debug"}}
	})
	testenv.Eventually(t, 60*time.Second, "LOG_LEVEL in the agent", func() error {
		if v := envValue(agentDeployment(t, ds, c.Spec.AgentNamespace), "LOG_LEVEL"); v != "debug" {
			return fmt.Errorf("LOG_LEVEL=%q", v)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	d := agentDeployment(t, ds, c.Spec.AgentNamespace)
	if d.Generation != before+1 {
		t.Errorf("generation %d -> %d, want one rollout", before, d.Generation)
	}
	got := getCluster(t, c)
	if got.Status.AgentEnvVarsHash == "" || got.Status.AgentConfigChanged {
		t.Errorf("status after redeploy: envVarsHash %q configChanged %v", got.Status.AgentEnvVarsHash, got.Status.AgentConfigChanged)
	}
	if n := waitEvents(t, c, "AgentRedeployed", 1); n != 1 {
		t.Errorf("AgentRedeployed events: %d, want 1", n)
	}
}

func TestImport_NoDownstreamWriteWithoutChange(t *testing.T) {
	ds := env.Downstreams[1]
	c := managerCluster(t, ds, nil)
	waitImported(t, c, 0)
	before := snapshot(t, ds, c.Spec.AgentNamespace)
	// Ten reconciles: each annotation change is an event the controller acts on.
	for i := 0; i < 10; i++ {
		updateCluster(t, c, func(cur *fleet.Cluster) {
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			cur.Annotations["test/poke"] = fmt.Sprint(i)
		})
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second)
	after := snapshot(t, ds, c.Spec.AgentNamespace)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s rewritten downstream without a change: resourceVersion %s -> %s", k, v, after[k])
		}
	}
	if n := countEvents(t, c, "AgentRedeployed"); n != 0 {
		t.Errorf("redeployed %d times without a change", n)
	}
}

// updateCluster changes a Cluster, retrying when the controller or an agent
// wrote it in between.
func updateCluster(t *testing.T, c *fleet.Cluster, mutate func(*fleet.Cluster)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getCluster(t, c)
		mutate(cur)
		return up.Update(t.Context(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}
