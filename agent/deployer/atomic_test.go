package deployer

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// brokenDeployment is a Deployment that cannot become available here: the test
// clusters run no kubelet, so its pods never run (a real failing
// deployment, nothing faked).
const brokenDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: broken
spec:
  replicas: 1
  selector:
    matchLabels: {app: broken}
  template:
    metadata:
      labels: {app: broken}
    spec:
      containers:
      - name: c
        image: example.invalid/broken:1
`

func (f *fixture) history(name string) *history {
	f.t.Helper()
	s := &corev1.Secret{}
	if err := f.down.Get(f.t.Context(), client.ObjectKey{Namespace: f.agentNS, Name: HistoryName(name)}, s); err != nil {
		f.t.Fatalf("history secret: %v", err)
	}
	h := &history{}
	if err := json.Unmarshal(s.Data[historyKey], h); err != nil {
		f.t.Fatal(err)
	}
	return h
}

// helm.atomic: a deployment that does not become ready within its timeout
// is replaced by the previous one (its objects back, what the failed one
// added pruned) and the status says so; a new deployment is applied again.
func TestDeployer_AtomicGoesBackAfterAFailingDeployment(t *testing.T) {
	f := newFixture(t)
	ns := "atomic-" + f.suffix
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{Atomic: true, TimeoutSeconds: 2}}
	good := f.deploy("app", configMapYAML("settings", "v1"), opts)
	f.waitBD("app", 30*time.Second, "v1 Ready", readyFor(good))
	testenv.Eventually(t, 15*time.Second, "v1 remembered", func() (bool, error) {
		h := f.history("app")
		return len(h.Entries) == 1 && h.Entries[0].DeploymentID == good, nil
	})

	bad := f.deploy("app", docs(configMapYAML("settings", "v2"), brokenDeployment), opts)
	bd, took := f.waitBD("app", 60*time.Second, "rolled back", failedWith(RolledBackReason))
	t.Logf("went back %s after the failing deployment", took)
	msg := condition(bd, fleet.ReadyCondition).Message
	if !strings.Contains(msg, "deployment "+shortID(bad)+" did not become ready") || !strings.Contains(msg, "went back to deployment "+shortID(good)) {
		t.Errorf("ready message %q", msg)
	}
	settings := cm(ns, "settings")
	if !f.exists(settings) || settings.Data["key"] != `v1` {
		t.Errorf("the previous deployment's configmap must be back: %v", settings.Data)
	}
	if f.exists(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken"}}) {
		t.Error("what only the failed deployment had must be pruned")
	}
	// It stays back (no apply loop) across resyncs.
	time.Sleep(3 * time.Second)
	bd = f.getBD("app")
	if c := condition(bd, fleet.DeployedCondition); c.Reason != RolledBackReason || f.exists(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken"}}) {
		t.Errorf("after resyncs: deployed %+v", c)
	}

	// A fixed deployment is applied and becomes the newest remembered.
	fixed := f.deploy("app", configMapYAML("settings", "v3"), opts)
	f.waitBD("app", 30*time.Second, "v3 Ready", readyFor(fixed))
	testenv.Eventually(t, 15*time.Second, "v3 remembered, rollback cleared", func() (bool, error) {
		h := f.history("app")
		return len(h.Entries) == 1 && h.Entries[0].DeploymentID == fixed && h.RolledBackFrom == "", nil
	})

	// Without atomic the failing deployment stays, reported as timed out.
	plain := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{TimeoutSeconds: 2}}
	f.deploy("app", docs(configMapYAML("settings", "v4"), brokenDeployment), plain)
	f.waitBD("app", 60*time.Second, "health timeout", func(bd *fleet.BundleDeployment) bool {
		return condition(bd, fleet.ReadyCondition).Reason == HealthTimeoutReason
	})
	if !f.exists(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken"}}) {
		t.Error("without atomic the failing deployment must stay")
	}

	// The history goes with the BundleDeployment.
	if err := f.up.Delete(t.Context(), f.getBD("app")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "history removed", func() (bool, error) {
		return !f.exists(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.agentNS, Name: HistoryName("app")}}), nil
	})
}

// helm.maxHistory bounds the deployments kept, newest first.
func TestDeployer_MaxHistoryBoundsTheHistory(t *testing.T) {
	f := newFixture(t)
	ns := "history-" + f.suffix
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{MaxHistory: 2}}
	var ids []string
	for _, v := range []string{"1", "2", "3"} {
		id := f.deploy("app", configMapYAML("settings", v), opts)
		f.waitBD("app", 30*time.Second, "Ready", readyFor(id))
		ids = append(ids, id)
		testenv.Eventually(t, 15*time.Second, "remembered", func() (bool, error) {
			h := f.history("app")
			return len(h.Entries) > 0 && h.Entries[0].DeploymentID == id, nil
		})
	}
	h := f.history("app")
	if len(h.Entries) != 2 || h.Entries[0].DeploymentID != ids[2] || h.Entries[1].DeploymentID != ids[1] {
		got := []string{}
		for _, e := range h.Entries {
			got = append(got, shortID(e.DeploymentID))
		}
		t.Errorf("history %v, want the last two", got)
	}
}

func TestHistoryLength(t *testing.T) {
	for _, tc := range []struct {
		h    *fleet.HelmOptions
		want int
	}{
		{nil, 0}, {&fleet.HelmOptions{}, 0}, {&fleet.HelmOptions{Atomic: true}, 1},
		{&fleet.HelmOptions{MaxHistory: 3}, 3}, {&fleet.HelmOptions{MaxHistory: 50, Atomic: true}, maxHistoryCap},
	} {
		if got := historyLength(fleet.BundleDeploymentOptions{Helm: tc.h}); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.h, got, tc.want)
		}
	}
}
