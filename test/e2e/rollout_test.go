package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/rollout"
	"github.com/gitops-fleet/fleet/dev/devenv"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
)

// testStagedRollout changes the agent image for every agent (a registry
// the nodes do not have, pull policy Never: the new pod can never start)
// with a staged rollout whose canary is dev-2: the canary's new pod does
// not start, the rollout halts at the deadline and puts dev-2 back on the
// running agent, and neither the local cluster nor dev-1 (both
// manager-initiated: not pushed either) ever gets the broken agent.
func testStagedRollout(t *testing.T, dev2Name string) {
	type member struct {
		key, bundleNS, bundle string
		cs                    *kubernetes.Clientset
		pod                   *corev1.Pod
		generation            int64
		content               string
	}
	members := []*member{
		{key: ws + "/" + dev2Name, bundleNS: ws, bundle: names.AgentBundle(dev2Name), cs: clientset(t, "dev-2")},
		{key: ws + "/dev-1", bundleNS: ws, bundle: names.AgentBundle("dev-1"), cs: clientset(t, "dev-1")},
		{key: "fleet-local/local", bundleNS: "fleet-local", bundle: names.AgentBundle("local"), cs: clientset(t, "upstream")},
	}
	canary := members[0]
	bundleOf := func(m *member) *fleet.Bundle {
		b := &fleet.Bundle{}
		must(t, up.Get(t.Context(), client.ObjectKey{Namespace: m.bundleNS, Name: m.bundle}, b))
		return b
	}
	for _, m := range members {
		m.pod = runningAgent(t, m.cs, 2*time.Minute)
		must(t, devenv.BundleReady(t.Context(), up, m.bundleNS, m.bundle, 1, 2*time.Minute))
		b := bundleOf(m)
		m.generation, m.content = b.Generation, b.Spec.Resources[0].Content
	}
	updateCluster(t, dev2Name, func(c *fleet.Cluster) {
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels["rollout"] = "canary"
	})

	// The configuration, as `helm upgrade --set` would change it.
	cm := &corev1.ConfigMap{}
	cmKey := client.ObjectKey{Namespace: agentNS, Name: config.ConfigMapName}
	must(t, up.Get(t.Context(), cmKey, cm))
	original := cm.Data[config.ConfigMapKey]
	// Put the configuration back for the tests that follow (t.Context() is
	// already canceled when cleanups run).
	t.Cleanup(func() {
		ctx := context.Background()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cm := &corev1.ConfigMap{}
			if err := up.Get(ctx, cmKey, cm); err != nil {
				return err
			}
			cm.Data[config.ConfigMapKey] = original
			return up.Update(ctx, cm)
		})
		if err != nil {
			t.Errorf("putting the controller configuration back: %v", err)
		}
	})
	doc := map[string]any{}
	must(t, json.Unmarshal([]byte(original), &doc))
	doc["systemDefaultRegistry"] = "registry.invalid"
	// The canary is selected on a key agents may not set.
	doc["agentLabelKeys"] = []string{"env", "region"}
	doc["agentRollout"] = map[string]any{
		"canary":           map[string]any{"selector": map[string]any{"matchLabels": map[string]string{"rollout": "canary"}}},
		"maxUnavailable":   1,
		"progressDeadline": "45s",
		"autoRollback":     true,
	}
	changed, err := json.Marshal(doc)
	must(t, err)
	cm.Data[config.ConfigMapKey] = string(changed)
	must(t, up.Update(t.Context(), cm))

	brokenPod := func(m *member) error {
		pods, err := m.cs.CoreV1().Pods(agentNS).List(t.Context(), metav1.ListOptions{LabelSelector: agentPods})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Spec.Containers[0].Image, "registry.invalid/") {
				return fmt.Errorf("agent pod %s runs %s", p.Name, p.Spec.Containers[0].Image)
			}
		}
		return nil
	}
	must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
		if brokenPod(canary) == nil {
			return fmt.Errorf("the canary has no pod of the new revision yet")
		}
		return nil
	}))
	var ro *fleet.AgentRollout
	must(t, devenv.Poll(t.Context(), 3*time.Minute, func() error {
		var err error
		if ro, err = rollout.Latest(t.Context(), up); err != nil {
			return err
		}
		if ro.Status.Phase != fleet.RolloutHalted || !slices.Equal(ro.Status.RolledBack, []string{canary.key}) {
			return fmt.Errorf("AgentRollout %s: %s (%s), rolled back %v", ro.Name, ro.Status.Phase, ro.Status.Message, ro.Status.RolledBack)
		}
		return nil
	}))
	if !ro.Status.Waves[0].Canary || !slices.Equal(ro.Status.Waves[0].Clusters, []string{canary.key}) {
		t.Fatalf("plan %+v: want dev-2 alone as the canary", ro.Status.Waves)
	}

	// The canary is back on its running agent: the broken pod is gone, the
	// old one never left.
	must(t, devenv.Poll(t.Context(), 3*time.Minute, func() error {
		if b := bundleOf(canary); b.Spec.Resources[0].Content != canary.content {
			return fmt.Errorf("the canary's agent Bundle is not back to what it was")
		}
		return brokenPod(canary)
	}))
	must(t, devenv.BundleReady(t.Context(), up, canary.bundleNS, canary.bundle, 1, 2*time.Minute))
	if now := runningAgent(t, canary.cs, 2*time.Minute); now.UID != canary.pod.UID {
		t.Errorf("the canary's agent pod is %s, was %s: the running agent should have stayed", now.Name, canary.pod.Name)
	}
	if c := meta.FindStatusCondition(getCluster(t, dev2Name).Status.Conditions, fleet.AgentRolloutCondition); c == nil || c.Reason != "RolledBack" {
		t.Errorf("dev-2 AgentRollout condition %+v, want reason RolledBack", c)
	}

	// Nobody else ever got it, pushed or through their Bundle.
	for _, m := range members[1:] {
		if b := bundleOf(m); b.Generation != m.generation {
			t.Errorf("%s: agent Bundle changed (generation %d, was %d) while the canary failed", m.key, b.Generation, m.generation)
		}
		if err := brokenPod(m); err != nil {
			t.Errorf("%s: %v", m.key, err)
		}
		if now := runningAgent(t, m.cs, time.Minute); now.UID != m.pod.UID {
			t.Errorf("%s: agent pod %s, was %s", m.key, now.Name, m.pod.Name)
		}
	}
	c := &fleet.Cluster{}
	must(t, up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "dev-1"}, c))
	if cond := meta.FindStatusCondition(c.Status.Conditions, fleet.AgentRolloutCondition); cond == nil || cond.Reason != rollout.WaitingForWaveReason {
		t.Errorf("dev-1 AgentRollout condition %+v, want reason %s", cond, rollout.WaitingForWaveReason)
	}
}
