package cluster_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/charts/chartstest"
	"github.com/gitops-fleet/fleet/controller/cluster"
	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/controller/remote"
	"github.com/gitops-fleet/fleet/controller/token"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/renderer"
)

// This suite runs the Cluster reconciler as successive controller
// processes (a manager and a Reconciler each, nothing shared but the API
// servers) against one upstream and one downstream, to see what a restart
// and an upgrade that ships another agent chart do to a manager-initiated
// cluster. Only one process runs at a time.

var (
	env *controlplane.Env
	up  client.Client
)

func TestMain(m *testing.M) {
	// No kube-controller-manager: nothing here needs garbage collection or
	// namespace deletion, and the machine may be busy.
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{Downstreams: 1, NoControllerManager: true}}, func(s *testenv.Suite) error {
		env, up = s.Env, s.Env.Upstream.Client
		return nil
	})
}

func controllerConfig() *config.Config {
	return &config.Config{APIServerURL: "https://upstream.example.com:6443", APIServerCA: []byte("upstream-ca")}
}

// process is one controller process as far as agents go: the Cluster
// reconciler with the given agent renderer (the chart its binary embeds),
// and the token reconciler that prepares its import tokens.
type process struct {
	r      *cluster.Reconciler
	cancel context.CancelFunc
	run    *testenv.Runner
}

func startProcess(t *testing.T, ar *renderer.AgentRenderer) *process {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Upstream.Config, testenv.ManagerOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{cancel: cancel}
	store := configstore.New(config.DefaultSystemNamespace, config.ConfigMapName, controllerConfig())
	events := mgr.GetEventRecorder("fleet-controller")
	p.r = &cluster.Reconciler{
		Client:    mgr.GetClient(),
		Cache:     mgr.GetCache(),
		APIReader: mgr.GetAPIReader(),
		Config:    store,
		Renderer:  ar,
		Remotes:   remote.NewCache(controlplane.Scheme),
		Recorder:  events,
	}
	if err := p.r.SetupWithManager(ctx, mgr, cluster.SetupOptions{}); err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := (&token.Reconciler{Client: mgr.GetClient(), Config: store, Clientset: env.Upstream.Clientset, Recorder: events}).SetupWithManager(mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	p.run = testenv.Go(ctx, "controller process", mgr.Start)
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop ends the process and waits for it.
func (p *process) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	if err := p.run.Wait(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// settle makes the process reconcile the Cluster (an annotation change) and
// waits until it found nothing to deploy.
func (p *process) settle(t *testing.T, c *fleet.Cluster) {
	t.Helper()
	poke(t, c)
	testenv.Eventually(t, 60*time.Second, "the reconciler to find nothing to deploy", func() error {
		if !cluster.FoundNothingToDeploy(p.r, client.ObjectKeyFromObject(c)) {
			return fmt.Errorf("status: %+v", getCluster(t, c).Status)
		}
		return nil
	})
}

func embeddedRenderer(t *testing.T) *renderer.AgentRenderer {
	t.Helper()
	r, err := renderer.NewAgentRenderer()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// upgradedChart is the embedded agent chart with a pod template annotation
// added: the agent chart a controller upgrade could ship.
func upgradedChart(t *testing.T) fs.FS {
	t.Helper()
	return chartstest.PatchedFleetAgent(t, "templates/deployment.yaml", "  template:\n    metadata:\n",
		"  template:\n    metadata:\n      annotations:\n        fleet.test/chart: v2\n")
}

func upgradedRenderer(t *testing.T) *renderer.AgentRenderer {
	t.Helper()
	r, err := renderer.NewAgentRendererFS(upgradedChart(t))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestChart_RestartWithTheSameChartRedeploysNothing: repeated reconciles and
// a controller restart with the same agent chart (loaded again) leave the
// downstream cluster, the agent Bundle and the status as they were.
func TestChart_RestartWithTheSameChartRedeploysNothing(t *testing.T) {
	ds := env.Downstreams[0]
	c := managerCluster(t, ds)
	first := startProcess(t, embeddedRenderer(t))
	waitImported(t, c)
	first.settle(t, c)
	credential(t, ds, c)
	before := observe(t, ds, c)

	for i := 0; i < 5; i++ {
		poke(t, c)
		time.Sleep(200 * time.Millisecond)
	}
	first.stop(t)
	second := startProcess(t, embeddedRenderer(t))
	second.settle(t, c)
	for i := 0; i < 5; i++ {
		poke(t, c)
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // a redeploy would show by now
	after := observe(t, ds, c)
	before.mustEqual(t, after)
	if n := countEvents(t, c, "AgentRedeployed"); n != 0 {
		t.Errorf("AgentRedeployed events: %d, want 0", n)
	}
	forget(t, c)
}

// TestChart_UpgradeWithAnotherChartRedeploysOnce: a controller whose agent
// chart differs (same values) pushes the agent to a manager-initiated
// cluster exactly once and rewrites its agent Bundle exactly once; further
// reconciles and another restart with that chart change nothing.
func TestChart_UpgradeWithAnotherChartRedeploysOnce(t *testing.T) {
	ds := env.Downstreams[0]
	c := managerCluster(t, ds)
	old := startProcess(t, embeddedRenderer(t))
	waitImported(t, c)
	old.settle(t, c)
	credential(t, ds, c)
	before := observe(t, ds, c)
	old.stop(t)

	upgraded := startProcess(t, upgradedRenderer(t))
	testenv.Eventually(t, 60*time.Second, "the agent redeployed with the upgraded chart", func() error {
		if n := countEvents(t, c, "AgentRedeployed"); n == 0 {
			return fmt.Errorf("AgentRedeployed events: %d", n)
		}
		return nil
	})
	upgraded.settle(t, c)
	if n := countEvents(t, c, "AgentRedeployed"); n != 1 {
		t.Errorf("AgentRedeployed events: %d, want 1", n)
	}
	mid := observe(t, ds, c)
	if mid.credentialExists {
		t.Error("the old agent credential is still there: the agent was not pushed again")
	}
	if mid.deployGeneration != before.deployGeneration+1 || mid.podAnnotation != "v2" {
		t.Errorf("want one agent rollout to the upgraded chart; Deployment generation %d -> %d, pod annotation %q",
			before.deployGeneration, mid.deployGeneration, mid.podAnnotation)
	}
	if mid.bundleGeneration != before.bundleGeneration+1 || mid.bundleContent == before.bundleContent ||
		!strings.Contains(mid.bundleContent, "fleet.test/chart: v2") {
		t.Errorf("want the agent Bundle rewritten once with the upgraded chart; generation %d -> %d, content has the change: %v",
			before.bundleGeneration, mid.bundleGeneration, strings.Contains(mid.bundleContent, "fleet.test/chart: v2"))
	}
	if mid.valuesHash == before.valuesHash || mid.deployedGeneration != 0 {
		t.Errorf("status after the upgrade: agentValuesHash %s -> %s, agentDeployedGeneration %d",
			before.valuesHash, mid.valuesHash, mid.deployedGeneration)
	}

	// The upgraded controller keeps reconciling, then restarts: nothing more.
	credential(t, ds, c)
	mid = observe(t, ds, c)
	for i := 0; i < 5; i++ {
		poke(t, c)
		time.Sleep(200 * time.Millisecond)
	}
	upgraded.stop(t)
	again := startProcess(t, upgradedRenderer(t))
	again.settle(t, c)
	time.Sleep(time.Second) // a redeploy would show by now
	mid.mustEqual(t, observe(t, ds, c))
	if n := countEvents(t, c, "AgentRedeployed"); n != 1 {
		t.Errorf("AgentRedeployed events: %d, want 1", n)
	}
	forget(t, c)
}

// observation is what a redeploy or a Bundle rewrite would change.
type observation struct {
	downstream         map[string]string // resourceVersions in the agent namespace
	credentialExists   bool
	deployGeneration   int64
	podAnnotation      string
	bundleGeneration   int64
	bundleVersion      string
	bundleContent      string
	valuesHash         string
	deployedGeneration int64
}

func observe(t *testing.T, ds *controlplane.ControlPlane, c *fleet.Cluster) observation {
	t.Helper()
	o := observation{downstream: map[string]string{}}
	ns := c.Spec.AgentNamespace
	lists := []client.ObjectList{&corev1.SecretList{}, &corev1.ConfigMapList{}, &corev1.ServiceAccountList{}, &appsv1.DeploymentList{}}
	for _, l := range lists {
		if err := ds.Client.List(t.Context(), l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(l)
		for _, it := range items {
			obj := it.(client.Object)
			o.downstream[fmt.Sprintf("%T/%s", obj, obj.GetName())] = obj.GetResourceVersion()
			if _, ok := obj.(*corev1.Secret); ok && obj.GetName() == registration.AgentCredentialSecretName {
				o.credentialExists = true
			}
			if d, ok := obj.(*appsv1.Deployment); ok && d.Name == "fleet-agent" {
				o.deployGeneration = d.Generation
				o.podAnnotation = d.Spec.Template.Annotations["fleet.test/chart"]
			}
		}
	}
	b := &fleet.Bundle{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: "fleet-agent-" + c.Name}, b); err != nil {
		t.Fatalf("agent Bundle: %v", err)
	}
	o.bundleGeneration, o.bundleVersion = b.Generation, b.ResourceVersion
	for _, r := range b.Spec.Resources {
		o.bundleContent += r.Content
	}
	got := getCluster(t, c)
	o.valuesHash = got.Status.AgentValuesHash
	if got.Status.AgentDeployedGeneration != nil {
		o.deployedGeneration = *got.Status.AgentDeployedGeneration
	}
	return o
}

func (o observation) mustEqual(t *testing.T, after observation) {
	t.Helper()
	for k, v := range o.downstream {
		if after.downstream[k] != v {
			t.Errorf("%s rewritten downstream: resourceVersion %s -> %s", k, v, after.downstream[k])
		}
	}
	if !after.credentialExists {
		t.Error("the agent credential was removed: the agent was pushed again")
	}
	if after.bundleVersion != o.bundleVersion {
		t.Errorf("agent Bundle rewritten: resourceVersion %s -> %s", o.bundleVersion, after.bundleVersion)
	}
	if after.valuesHash != o.valuesHash {
		t.Errorf("status.agentValuesHash %s -> %s", o.valuesHash, after.valuesHash)
	}
}

// managerCluster commits a Cluster and its kubeconfig Secret for the
// downstream, with an agent namespace of its own.
func managerCluster(t *testing.T, ds *controlplane.ControlPlane) *fleet.Cluster {
	t.Helper()
	ns := testenv.Namespace(t, up, "fleet-ws-")
	if err := up.Create(t.Context(), ds.KubeconfigSecret(ns, "kc")); err != nil {
		t.Fatal(err)
	}
	c := &fleet.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1"},
		Spec:       fleet.ClusterSpec{KubeConfigSecret: "kc", AgentNamespace: "agent-" + ns},
	}
	if err := up.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// credential puts the request credential a registered agent would hold
// into the agent namespace; pushing the agent again removes it.
func credential(t *testing.T, ds *controlplane.ControlPlane, c *fleet.Cluster) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Spec.AgentNamespace, Name: registration.AgentCredentialSecretName},
		StringData: map[string]string{"kubeconfig": "x"},
	}
	if err := ds.Client.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
}

// forget removes the Cluster without a controller (its finalizer first), so
// a later test's controller does not work on it.
func forget(t *testing.T, c *fleet.Cluster) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getCluster(t, c)
		controllerutil.RemoveFinalizer(cur, fleet.ClusterFinalizer)
		return up.Update(t.Context(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Delete(t.Context(), c); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func getCluster(t *testing.T, c *fleet.Cluster) *fleet.Cluster {
	t.Helper()
	got := &fleet.Cluster{}
	if err := up.Get(t.Context(), client.ObjectKeyFromObject(c), got); err != nil {
		t.Fatal(err)
	}
	return got
}

func waitImported(t *testing.T, c *fleet.Cluster) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "agent deployed", func() error {
		got := getCluster(t, c)
		cond := meta.FindStatusCondition(got.Status.Conditions, fleet.ImportedCondition)
		if got.Status.AgentDeployedGeneration == nil || cond == nil || cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("status: %+v", got.Status)
		}
		return nil
	})
}

// poke changes an annotation of the Cluster: an event the reconciler acts on.
func poke(t *testing.T, c *fleet.Cluster) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getCluster(t, c)
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations["test/poke"] = time.Now().Format(time.RFC3339Nano)
		return up.Update(t.Context(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
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
