// Package e2e runs the product on real local clusters (dev/devcluster):
// the controller installed with helm in the upstream, agents as real pods in
// downstream clusters, registered both ways, with real rollouts. `make e2e`
// runs it (CI runs make e2e beside make test RACE=1; make test does not include it).
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/devcluster"
	"github.com/gitops-fleet/fleet/dev/devenv"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
)

const (
	ws        = "fleet-default"
	agentNS   = devenv.SystemNamespace
	agentPods = "app=fleet-agent"
)

var (
	env      *devenv.Env
	up       client.Client
	stateDir = "/tmp/fleet-e2e"
)

func TestMain(m *testing.M) {
	if os.Getenv("FLEET_E2E") == "" {
		fmt.Println("e2e: skipped; set FLEET_E2E=1 (make e2e does) to run on real local clusters")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	bin := os.Getenv("FLEET_BIN_DIR")
	if bin == "" {
		bin, _ = filepath.Abs("../../bin")
	}
	repo, _ := filepath.Abs("../..")
	s, err := devcluster.Plan(stateDir, 1, "upstream", "dev-1", "dev-2")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	start := time.Now()
	err = devcluster.Up(context.Background(), s, devcluster.Options{
		BinDir: bin, Images: []string{filepath.Join(bin, "images", "images.tar")},
		// dev-1's API server asks its agent about direct tokens.
		DirectWebhook: []string{"dev-1"},
	})
	// fleet-dev down's promise is checked here too: after the suite,
	// nothing of the three clusters may remain on the machine.
	defer func() {
		if _, err := devcluster.Down(stateDir); err != nil {
			fmt.Println("e2e: down:", err)
			code = 1
		}
		if left := devcluster.Leftovers(s); len(left) > 0 {
			fmt.Println("e2e: left behind:", strings.Join(left, "; "))
			code = 1
		}
	}()
	if err != nil {
		fmt.Println("e2e: clusters up:", err)
		return 1
	}
	fmt.Printf("e2e: 3 real clusters up in %.1fs\n", time.Since(start).Seconds())
	env = &devenv.Env{State: s, RepoDir: repo, Helm: filepath.Join(bin, "helm")}
	if up, err = devenv.Client(s.Clusters[0]); err != nil {
		fmt.Println(err)
		return 1
	}
	return m.Run()
}

func cluster(name string) *devcluster.Cluster { return env.State.Cluster(name) }

func clientset(t *testing.T, name string) *kubernetes.Clientset {
	t.Helper()
	cs, err := cluster(name).Clientset()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// podTracker records every agent pod created in a cluster from now on.
type podTracker struct {
	mu      sync.Mutex
	created map[string]string // uid → name
	stop    func()
}

func trackPods(t *testing.T, cs *kubernetes.Clientset, ns, selector string) *podTracker {
	t.Helper()
	list, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	must(t, err)
	w, err := cs.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
	must(t, err)
	p := &podTracker{created: map[string]string{}, stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				p.mu.Lock()
				p.created[string(pod.UID)] = pod.Name
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(w.Stop)
	return p
}

func (p *podTracker) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.created)
}

// runningAgent waits until the agent Deployment is rolled out with one
// ready pod and no other pod, and returns that pod.
func runningAgent(t *testing.T, cs *kubernetes.Clientset, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	must(t, devenv.Poll(t.Context(), timeout, func() error {
		d, err := cs.AppsV1().Deployments(agentNS).Get(t.Context(), "fleet-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := rolledOut(d); err != nil {
			return err
		}
		pods, err := cs.CoreV1().Pods(agentNS).List(t.Context(), metav1.ListOptions{LabelSelector: agentPods})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d agent pods, want 1", len(pods.Items))
		}
		pod = &pods.Items[0]
		if pod.DeletionTimestamp != nil || !podReady(pod) {
			return fmt.Errorf("agent pod %s not ready", pod.Name)
		}
		return nil
	}))
	return pod
}

func rolledOut(d *appsv1.Deployment) error {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	if s.ObservedGeneration < d.Generation || s.UpdatedReplicas != want || s.Replicas != want || s.AvailableReplicas != want {
		return fmt.Errorf("deployment %s rolling out: %+v", d.Name, s)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func agentEnv(p *corev1.Pod, name string) string {
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func getCluster(t *testing.T, name string) *fleet.Cluster {
	t.Helper()
	c := &fleet.Cluster{}
	must(t, up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: name}, c))
	return c
}

func updateCluster(t *testing.T, name string, mutate func(*fleet.Cluster)) {
	t.Helper()
	must(t, devenv.Poll(t.Context(), 10*time.Second, func() error {
		c := &fleet.Cluster{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: name}, c); err != nil {
			return err
		}
		mutate(c)
		return up.Update(t.Context(), c)
	}))
}

// registrations counts the ClusterRegistrations of one Cluster (another
// cluster's agent may register meanwhile: dev-1's after its redeploy).
func registrations(t *testing.T, cluster string) int {
	t.Helper()
	l := &fleet.ClusterRegistrationList{}
	must(t, up.List(t.Context(), l, client.InNamespace(ws)))
	n := 0
	for _, r := range l.Items {
		if r.Status.ClusterName == cluster {
			n++
		}
	}
	return n
}

// expectOneRollout waits for the agent pod that replaces before to run
// with GENERATION=gen, then checks that the bump made exactly one pod.
func expectOneRollout(t *testing.T, cs *kubernetes.Clientset, pods *podTracker, before *corev1.Pod, gen int64) {
	t.Helper()
	must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
		p := runningAgent(t, cs, time.Minute)
		if p.UID == before.UID {
			return fmt.Errorf("still the old agent pod")
		}
		if got := agentEnv(p, "GENERATION"); got != fmt.Sprint(gen) {
			return fmt.Errorf("agent pod GENERATION=%s, want %d", got, gen)
		}
		return nil
	}))
	quiet()
	runningAgent(t, cs, time.Minute)
	if n := pods.count(); n != 1 {
		t.Errorf("%d agent pods created by one bump, want exactly 1", n)
	}
}

// readyThenConnected waits for Cluster name to be Ready and Connected (its
// agent's tunnel held by fleet-proxy: reachable through the manager), and
// logs how long after Ready Connected was first seen (both polled every
// 50 ms; the bench's ready-to-connected scenario is the measurement).
func readyThenConnected(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	var ready, connected time.Time
	must(t, devenv.PollEvery(t.Context(), 50*time.Millisecond, timeout, func() error {
		c := &fleet.Cluster{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: name}, c); err != nil {
			return err
		}
		now := time.Now()
		if ready.IsZero() && meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ReadyCondition) {
			ready = now
		}
		if connected.IsZero() && meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ConnectedCondition) {
			connected = now
		}
		if ready.IsZero() || connected.IsZero() {
			return fmt.Errorf("cluster %s: Ready seen %v, Connected seen %v", name, !ready.IsZero(), !connected.IsZero())
		}
		return nil
	}))
	t.Logf("cluster %s: Connected first seen %v after Ready (negative: before)", name, connected.Sub(ready).Round(time.Millisecond))
}

// quiet lets a rollout that should not happen have the time to show.
func quiet() { time.Sleep(5 * time.Second) }

func TestE2E(t *testing.T) {
	var dev2Name string
	t.Run("controller installed with helm", func(t *testing.T) {
		must(t, env.InstallController(t.Context(),
			// Cluster API auto-registration opted in for namespace capi.
			"capi.namespaces={capi}",
			// Agents check in every 20s, not every minute, and a new agent
			// pod takes the Lease 2s after the old one lets it go, not 10s:
			// the suite waits for heartbeats and agent restarts often.
			// Offline still comes after 3 minutes without a heartbeat, as
			// with the defaults, so every subtest sees the same states.
			"agent.checkinInterval=20s", "offlineAfterMissedHeartbeats=9",
			"agent.leaderElection.leaseDuration=15s", "agent.leaderElection.renewDeadline=10s",
			"agent.leaderElection.retryPeriod=2s"))
	})

	t.Run("the upstream registers itself as fleet-local/local, its agent in cattle-fleet-system", func(t *testing.T) {
		if _, err := devenv.ClusterReady(t.Context(), up, "fleet-local", "local", 3*time.Minute); err != nil {
			t.Fatalf("%v\n%s", err, devenv.PodReport(t.Context(), cluster("upstream"), agentNS))
		}
		if _, err := clientset(t, "upstream").AppsV1().Deployments(agentNS).Get(t.Context(), "fleet-agent", metav1.GetOptions{}); err != nil {
			t.Errorf("the local agent's Deployment: %v", err)
		}
	})

	t.Run("manager-initiated: examples/gitops applied, agent pushed, adopted without a restart", func(t *testing.T) {
		cs := clientset(t, "dev-1")
		kc, err := cluster("dev-1").PortableKubeconfig()
		must(t, err)
		objs, err := devenv.BuildGitops(filepath.Join(env.RepoDir, "examples", "gitops"), map[string][]byte{"dev-1-kubeconfig": kc})
		must(t, err)
		pods := trackPods(t, cs, agentNS, agentPods)
		must(t, devenv.Apply(t.Context(), up, objs))
		readyThenConnected(t, "dev-1", 3*time.Minute)
		first := runningAgent(t, cs, 2*time.Minute)
		// The agent's own Bundle (manageagent) is applied by the agent itself:
		// wait for it to be Ready on dev-1, then the pod must be the same.
		must(t, devenv.BundleReady(t.Context(), up, ws, names.AgentBundle("dev-1"), 1, 2*time.Minute))
		quiet()
		now := runningAgent(t, cs, time.Minute)
		if now.UID != first.UID || now.Status.ContainerStatuses[0].RestartCount != 0 || pods.count() != 1 {
			t.Errorf("adoption restarted the agent: first pod %s, now %s (restarts %d), %d pods created",
				first.Name, now.Name, now.Status.ContainerStatuses[0].RestartCount, pods.count())
		}
		d, err := cs.AppsV1().Deployments(agentNS).Get(t.Context(), "fleet-agent", metav1.GetOptions{})
		must(t, err)
		for _, mf := range d.ManagedFields {
			if mf.Operation == metav1.ManagedFieldsOperationApply && mf.Manager != "fleet" {
				t.Errorf("agent Deployment applied by %q too; want only the field manager fleet", mf.Manager)
			}
		}
	})

	t.Run("agent-initiated: helm install fleet-agent with the token's values", func(t *testing.T) {
		cs := clientset(t, "dev-2")
		values, err := devenv.TokenValues(t.Context(), up, ws, "dev-token")
		must(t, err)
		pods := trackPods(t, cs, agentNS, agentPods)
		must(t, env.InstallAgent(t.Context(), cluster("dev-2"), agentNS, values, "clientID=dev-2", "labels.env=dev"))
		c, err := devenv.ClusterByClientID(t.Context(), up, ws, "dev-2", 2*time.Minute)
		must(t, err)
		dev2Name = c.Name
		readyThenConnected(t, c.Name, time.Minute)
		if c.Labels["env"] != "dev" {
			t.Errorf("cluster %s labels %v: want env=dev from --set labels.env=dev", c.Name, c.Labels)
		}
		must(t, devenv.BundleReady(t.Context(), up, ws, names.AgentBundle(c.Name), 1, 2*time.Minute))
		quiet()
		runningAgent(t, cs, time.Minute)
		if n := pods.count(); n != 1 {
			t.Errorf("%d agent pods created; the helm-installed agent must be adopted by its Bundle without a new pod", n)
		}
		must(t, devenv.BundleReady(t.Context(), up, ws, "hello", 2, 2*time.Minute))
		hello, err := cs.AppsV1().Deployments("hello").Get(t.Context(), "hello", metav1.GetOptions{})
		must(t, err)
		must(t, rolledOut(hello))
	})

	t.Run("Bundles render in fleet-renderer: no ServiceAccount token, callers without the controller's token refused", testRenderer)

	t.Run("Helm hooks: a pre-install Job runs before the main objects on a real kubelet, a failing one stops the deployment with its reason", testHooks)

	t.Run("Bundles as fleet apply writes them, applied with kubectl: dependsOn, values per cluster, partitioned rollout; fleet render bundle and fleet diff show them as deployed", func(t *testing.T) {
		if dev2Name == "" {
			t.Skip("dev-2 did not register")
		}
		testBundles(t, dev2Name)
	})

	t.Run("GitOps: fleet-gitops reads a real git server over HTTPS and SSH; commits, a bad fleet.yaml, a removed path, a webhook, a refused repository", func(t *testing.T) {
		if dev2Name == "" {
			t.Skip("dev-2 did not register")
		}
		testGitOps(t, dev2Name)
	})

	for _, tc := range []struct{ name, cluster string }{
		{"manager-initiated", "dev-1"}, {"agent-initiated", "dev-2"},
	} {
		t.Run("redeployAgentGeneration bump rolls exactly one new agent pod: "+tc.name, func(t *testing.T) {
			name := tc.cluster
			if name == "dev-2" {
				name = dev2Name
			}
			if name == "" {
				t.Skip("dev-2 did not register")
			}
			cs := clientset(t, tc.cluster)
			before := runningAgent(t, cs, time.Minute)
			pods := trackPods(t, cs, agentNS, agentPods)
			gen := getCluster(t, name).Spec.RedeployAgentGeneration + 1
			updateCluster(t, name, func(c *fleet.Cluster) { c.Spec.RedeployAgentGeneration = gen })
			expectOneRollout(t, cs, pods, before, gen)
			// The new agent reports the generation it runs with.
			must(t, devenv.Poll(t.Context(), time.Minute, func() error {
				if g := getCluster(t, name).Status.Agent.Generation; g == nil || *g != gen {
					return fmt.Errorf("status.agent.generation %v, want %d", g, gen)
				}
				return nil
			}))
		})
	}

	t.Run("agent setting change rolls the agent once with the new setting", func(t *testing.T) {
		cs := clientset(t, "dev-1")
		runningAgent(t, cs, time.Minute)
		pods := trackPods(t, cs, agentNS, agentPods)
		updateCluster(t, "dev-1", func(c *fleet.Cluster) {
			c.Spec.AgentEnvVars = append(c.Spec.AgentEnvVars, corev1.EnvVar{Name: "E2E_SETTING", Value: "on"})
		})
		must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
			if p := runningAgent(t, cs, time.Minute); agentEnv(p, "E2E_SETTING") != "on" {
				return fmt.Errorf("agent pod %s has no E2E_SETTING yet", p.Name)
			}
			return nil
		}))
		quiet()
		runningAgent(t, cs, time.Minute)
		if n := pods.count(); n != 1 {
			t.Errorf("%d agent pods created by one setting change, want exactly 1", n)
		}
	})

	t.Run("agent pod killed: the new pod resumes without re-registering", func(t *testing.T) {
		if dev2Name == "" {
			t.Skip("dev-2 did not register")
		}
		cs := clientset(t, "dev-2")
		old := runningAgent(t, cs, time.Minute)
		cred, err := cs.CoreV1().Secrets(agentNS).Get(t.Context(), "fleet-agent", metav1.GetOptions{})
		must(t, err)
		regs := registrations(t, dev2Name)
		seen := getCluster(t, dev2Name).Status.Agent.LastSeen
		must(t, cs.CoreV1().Pods(agentNS).Delete(t.Context(), old.Name, metav1.DeleteOptions{}))
		must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
			if p := runningAgent(t, cs, time.Minute); p.UID == old.UID {
				return fmt.Errorf("old pod still there")
			}
			c := getCluster(t, dev2Name)
			if !c.Status.Agent.LastSeen.After(seen.Time) {
				return fmt.Errorf("no heartbeat from the new agent pod yet")
			}
			return nil
		}))
		after, err := cs.CoreV1().Secrets(agentNS).Get(t.Context(), "fleet-agent", metav1.GetOptions{})
		must(t, err)
		if after.ResourceVersion != cred.ResourceVersion {
			t.Error("the fleet-agent credential was rewritten: the new pod registered again")
		}
		if n := registrations(t, dev2Name); n != regs {
			t.Errorf("%d ClusterRegistrations, was %d: the new pod registered again", n, regs)
		}
		if _, err := devenv.ClusterReady(t.Context(), up, ws, dev2Name, time.Minute); err != nil {
			t.Error(err)
		}
	})

	t.Run("recovery: an agent whose credential died while it was stopped comes back by itself", func(t *testing.T) {
		if dev2Name == "" {
			t.Skip("dev-2 did not register")
		}
		testRecovery(t, dev2Name)
	})

	t.Run("reinstall: helm uninstall and install with a generic token's values while the Cluster is online", func(t *testing.T) {
		if dev2Name == "" {
			t.Skip("dev-2 did not register")
		}
		testReinstall(t, dev2Name)
	})

	t.Run("an agent update whose pod never becomes ready keeps the old agent running", func(t *testing.T) {
		if dev2Name == "" {
			t.Skip("dev-2 did not register")
		}
		cs := clientset(t, "dev-2")
		old := runningAgent(t, cs, time.Minute)
		// An image that is not on the node (pull policy Never): the new pod
		// can never start. This reaches dev-2 only through its agent Bundle.
		updateCluster(t, dev2Name, func(c *fleet.Cluster) { c.Spec.PrivateRepoURL = "registry.invalid" })
		must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
			pods, err := cs.CoreV1().Pods(agentNS).List(t.Context(), metav1.ListOptions{LabelSelector: agentPods})
			if err != nil {
				return err
			}
			for _, p := range pods.Items {
				if p.UID != old.UID && strings.HasPrefix(p.Spec.Containers[0].Image, "registry.invalid/") {
					return nil
				}
			}
			return fmt.Errorf("no new agent pod with the broken image yet")
		}))
		quiet()
		pod, err := cs.CoreV1().Pods(agentNS).Get(t.Context(), old.Name, metav1.GetOptions{})
		must(t, err)
		if pod.UID != old.UID || !podReady(pod) || pod.DeletionTimestamp != nil {
			t.Fatalf("the old agent pod was taken down for a new one that cannot start")
		}
		b := &fleet.Bundle{}
		must(t, up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: names.AgentBundle(dev2Name)}, b))
		if devenv.BundleReady(t.Context(), up, ws, b.Name, 1, time.Second) == nil {
			t.Error("the agent Bundle reports Ready while its new agent cannot start")
		}

		// Reverting the setting brings the Deployment back to the running
		// pod's template: no new pod, the old one stays.
		pods := trackPods(t, cs, agentNS, agentPods)
		updateCluster(t, dev2Name, func(c *fleet.Cluster) { c.Spec.PrivateRepoURL = "" })
		must(t, devenv.BundleReady(t.Context(), up, ws, b.Name, 1, 2*time.Minute))
		now := runningAgent(t, cs, 2*time.Minute)
		if now.UID != old.UID || pods.count() != 0 {
			t.Errorf("after the revert: agent pod %s (was %s), %d pods created", now.Name, old.Name, pods.count())
		}
	})

	t.Run("staged rollout: a new agent revision whose pod cannot start halts at the canary and rolls back", func(t *testing.T) {
		if dev2Name == "" {
			t.Skip("dev-2 did not register")
		}
		testStagedRollout(t, dev2Name)
	})

	t.Run("trust: an agent's own identity cannot rewrite its Cluster's status", func(t *testing.T) {
		// The attack reproduced on real clusters before SPEC §6 held: with the
		// kubeconfig of the downstream fleet-agent Secret, point
		// status.namespace elsewhere and fake agentDeployedGeneration.
		cs := clientset(t, "dev-1")
		cred, err := cs.CoreV1().Secrets(agentNS).Get(t.Context(), "fleet-agent", metav1.GetOptions{})
		must(t, err)
		cfg, err := clientcmd.RESTConfigFromKubeConfig(cred.Data[registration.KeyKubeconfig])
		must(t, err)
		agent, err := client.New(cfg, client.Options{Scheme: up.Scheme()})
		must(t, err)
		before := getCluster(t, "dev-1")
		patch := func(body string) error {
			c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "dev-1"}}
			return agent.Status().Patch(t.Context(), c, client.RawPatch(types.MergePatchType, []byte(body)))
		}
		for _, body := range []string{`{"status":{"namespace":"kube-system"}}`, `{"status":{"agentDeployedGeneration":42}}`} {
			if err := patch(body); !apierrors.IsForbidden(err) {
				t.Errorf("the agent's identity patched %s: want 403 from the API server, got %v", body, err)
			}
		}
		// Its heartbeat still goes through.
		must(t, patch(`{"status":{"agent":{"lastSeen":"`+time.Now().UTC().Format(time.RFC3339)+`"}}}`))
		quiet()
		after := getCluster(t, "dev-1")
		wasGen, nowGen := ptr.Deref(before.Status.AgentDeployedGeneration, -1), ptr.Deref(after.Status.AgentDeployedGeneration, -1)
		if after.Status.Namespace != before.Status.Namespace || nowGen != wasGen {
			t.Errorf("status changed: namespace %q -> %q, agentDeployedGeneration %d -> %d", before.Status.Namespace, after.Status.Namespace, wasGen, nowGen)
		}
		if _, err := cs.AppsV1().Deployments(agentNS).Get(t.Context(), "fleet-agent", metav1.GetOptions{}); err != nil {
			t.Errorf("the agent of dev-1 is gone: %v", err)
		}
	})

	t.Run("trust: a kubeconfig naming the controller's own token file is refused, nothing is pushed", func(t *testing.T) {
		kc, err := cluster("dev-1").PortableKubeconfig()
		must(t, err)
		raw, err := clientcmd.Load(kc)
		must(t, err)
		for _, u := range raw.AuthInfos {
			u.ClientCertificateData, u.ClientKeyData, u.Token = nil, nil, ""
			u.TokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		}
		kc, err = clientcmd.Write(*raw)
		must(t, err)
		const unsafeNS = "fleet-e2e-unsafe"
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "stolen-token-kubeconfig"}, Data: map[string][]byte{"value": kc}}
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "stolen-token"},
			Spec: fleet.ClusterSpec{KubeConfigSecret: secret.Name, AgentNamespace: unsafeNS}}
		must(t, up.Create(t.Context(), secret))
		must(t, up.Create(t.Context(), c))
		must(t, devenv.Poll(t.Context(), time.Minute, func() error {
			got := getCluster(t, c.Name)
			st := meta.FindStatusCondition(got.Status.Conditions, fleet.StalledCondition)
			if st == nil || st.Status != metav1.ConditionTrue || st.Reason != fleet.KubeConfigUnsafeReason || !strings.Contains(st.Message, "tokenFile") {
				return fmt.Errorf("conditions %+v", got.Status.Conditions)
			}
			return nil
		}))
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: names.ImportToken(c.Name)}, &fleet.ClusterRegistrationToken{}); !apierrors.IsNotFound(err) {
			t.Errorf("an import token was made for the refused kubeconfig: %v", err)
		}
		for _, name := range []string{"dev-1", "dev-2"} {
			if _, err := clientset(t, name).CoreV1().Namespaces().Get(t.Context(), unsafeNS, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("%s: the agent namespace %s exists: %v", name, unsafeNS, err)
			}
		}
		// Deleting it does not use the kubeconfig either, and leaves nothing.
		must(t, up.Delete(t.Context(), c))
		must(t, up.Delete(t.Context(), secret))
		must(t, devenv.Poll(t.Context(), time.Minute, func() error {
			if err := up.Get(t.Context(), client.ObjectKeyFromObject(c), &fleet.Cluster{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("cluster still there (%v)", err)
			}
			return nil
		}))
	})

	t.Run("cluster access through the manager", func(t *testing.T) { testAccess(t, dev2Name) })

	t.Run("direct access: the authorized cluster endpoint served by the agent", func(t *testing.T) { testDirect(t, dev2Name, "dev-2", "agent") })
	t.Run("direct access: the agent as the API server's token webhook", func(t *testing.T) { testDirect(t, "dev-1", "dev-1", "webhook") })

	t.Run("Cluster deleted: cleaned up upstream and downstream", func(t *testing.T) {
		cs := clientset(t, "dev-1")
		c := getCluster(t, "dev-1")
		clusterNS := c.Status.Namespace
		must(t, up.Delete(t.Context(), c))
		must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
			if err := up.Get(t.Context(), client.ObjectKeyFromObject(c), &fleet.Cluster{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("cluster still there (%v)", err)
			}
			if clusterNS != "" {
				if err := up.Get(t.Context(), client.ObjectKey{Name: clusterNS}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("cluster namespace %s still there (%v)", clusterNS, err)
				}
			}
			if _, err := cs.AppsV1().Deployments(agentNS).Get(t.Context(), "fleet-agent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("agent Deployment still in dev-1 (%v)", err)
			}
			return nil
		}))
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: names.AgentBundle("dev-1")}, &fleet.Bundle{}); !apierrors.IsNotFound(err) {
			t.Errorf("agent Bundle of dev-1 still there (%v)", err)
		}
	})

	t.Run("Cluster API cluster auto-registered (dev-1, free again), and removed with it", func(t *testing.T) {
		crd, err := os.ReadFile(filepath.Join(env.RepoDir, "controller", "capi", "testdata", "cluster-api-crd.yaml"))
		must(t, err)
		objs, err := apply.ReadObjects(crd)
		must(t, err)
		must(t, devenv.Apply(t.Context(), up, objs))
		kc, err := cluster("dev-1").PortableKubeconfig()
		must(t, err)
		ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "capi"}}}
		secret := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
			"metadata":   map[string]any{"name": "dev-1-kubeconfig", "namespace": "capi", "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "dev-1"}},
			"stringData": map[string]any{"value": string(kc)}}}
		capiCluster := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
			"metadata": map[string]any{"name": "dev-1", "namespace": "capi", "labels": map[string]any{"env": "staging"}},
			"spec":     map[string]any{}}}
		must(t, devenv.Apply(t.Context(), up, []*unstructured.Unstructured{ns, secret, capiCluster}))
		c, err := devenv.ClusterReady(t.Context(), up, "capi", "dev-1", 3*time.Minute)
		must(t, err)
		if c.Labels["env"] != "staging" || c.Spec.KubeConfigSecret != "dev-1-kubeconfig" {
			t.Errorf("auto-registered cluster: labels %v, kubeConfigSecret %q", c.Labels, c.Spec.KubeConfigSecret)
		}
		cs := clientset(t, "dev-1")
		runningAgent(t, cs, 2*time.Minute)

		must(t, up.Delete(t.Context(), capiCluster))
		must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
			if err := up.Get(t.Context(), client.ObjectKey{Namespace: "capi", Name: "dev-1"}, &fleet.Cluster{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("fleet Cluster capi/dev-1 still there (%v)", err)
			}
			if _, err := cs.AppsV1().Deployments(agentNS).Get(t.Context(), "fleet-agent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("agent Deployment still in dev-1 (%v)", err)
			}
			return nil
		}))
	})

	t.Run("the used-by from git, as make demo: examples/gitops on a git server, a GitRepo in fleet-local registers dev-1 through its SOPS-encrypted kubeconfig, a redeployAgentGeneration commit rolls exactly one agent pod", testRegisterFromGit)

	// Last: it removes what every test above shares.
	t.Run("uninstall: nothing of fleet left upstream or downstream, nothing Terminating, the user's namespaces untouched", func(t *testing.T) {
		testUninstall(t, dev2Name)
	})
}
