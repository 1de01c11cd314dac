package rollout_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/cluster"
	"github.com/gitops-fleet/fleet/controller/rollout"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

const clusters = 12

// agents makes clusters agent-initiated Clusters in two workspaces, each
// with an agent that checked in (its namespace reported), so each gets an
// agent Bundle; cluster 0 is labelled env=canary.
func agents(t *testing.T) []string {
	t.Helper()
	ws := []string{testenv.Namespace(t, up, "fleet-a-"), testenv.Namespace(t, up, "fleet-b-")}
	var keys []string
	for i := range clusters {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws[i%2], Name: fmt.Sprintf("c%02d", i), Labels: map[string]string{}},
			Spec: fleet.ClusterSpec{ClientID: fmt.Sprintf("client-%02d", i)}}
		if i == 0 {
			c.Labels["env"] = "canary"
		}
		if err := up.Create(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		// The first check-in (the controller adds its finalizer meanwhile).
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := up.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
				return err
			}
			c.Status.Agent = fleet.AgentStatus{Namespace: "cattle-fleet-system", LastSeen: metav1.Now(), HeartbeatIntervalSeconds: 900}
			return up.Status().Update(t.Context(), c)
		}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, c.Namespace+"/"+c.Name)
	}
	// Gone again, and the configuration back, for whatever runs next.
	t.Cleanup(func() {
		ctx := context.Background()
		for _, k := range keys {
			_ = up.Delete(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: split(k).Namespace, Name: split(k).Name}})
		}
		testenv.Eventually(t, 60*time.Second, "the test's Clusters gone", func() error {
			for _, k := range keys {
				if err := up.Get(ctx, split(k), &fleet.Cluster{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("%s still there (%v)", k, err)
				}
			}
			return nil
		})
		setConfig(t, baseConfig())
	})
	return keys
}

func split(key string) client.ObjectKey {
	ns, name, _ := strings.Cut(key, "/")
	return client.ObjectKey{Namespace: ns, Name: name}
}

func agentBundle(t *testing.T, key string) *fleet.Bundle {
	t.Helper()
	b, err := tryBundle(t, key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tryBundle(t *testing.T, key string) (*fleet.Bundle, error) {
	k := split(key)
	b := &fleet.Bundle{}
	return b, up.Get(t.Context(), client.ObjectKey{Namespace: k.Namespace, Name: "fleet-agent-" + k.Name}, b)
}

func getCluster(t *testing.T, key string) *fleet.Cluster {
	t.Helper()
	c := &fleet.Cluster{}
	if err := up.Get(t.Context(), split(key), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitRollout waits for the AgentRollout that is not one of the known
// revisions' and for cond to hold on it.
func waitRollout(t *testing.T, what string, skip []string, cond func(*fleet.AgentRollout) error) *fleet.AgentRollout {
	t.Helper()
	var got *fleet.AgentRollout
	testenv.Eventually(t, 90*time.Second, what, func() error {
		ro, err := rollout.Latest(t.Context(), up)
		if err != nil {
			return err
		}
		if slices.Contains(skip, ro.Spec.Revision) {
			return fmt.Errorf("latest AgentRollout %s is of a known revision", ro.Name)
		}
		if err := cond(ro); err != nil {
			return fmt.Errorf("%s: %s wave %s (%s): %w", ro.Name, ro.Status.Phase, ro.Status.Display.Wave, ro.Status.Message, err)
		}
		got = ro
		return nil
	})
	return got
}

// phase waits for a phase and checks the conditions it gives (the kstatus
// conditions of every fleet kind).
func phase(p string) func(*fleet.AgentRollout) error {
	return func(ro *fleet.AgentRollout) error {
		if ro.Status.Phase != p {
			return fmt.Errorf("want phase %s", p)
		}
		return phaseConditions(ro)
	}
}

// phaseConditions checks that ro's conditions say what its phase does.
func phaseConditions(ro *fleet.AgentRollout) error {
	want := map[string]struct {
		ready              metav1.ConditionStatus
		reason             string
		reconciling, stall bool
	}{
		fleet.RolloutComplete: {ready: metav1.ConditionTrue, reason: fleet.SucceededReason},
		fleet.RolloutPaused:   {ready: metav1.ConditionFalse, reason: fleet.PausedReason, reconciling: true},
		fleet.RolloutHalted:   {ready: metav1.ConditionFalse, reason: rollout.HaltedReason, stall: true},
		fleet.RolloutAborted:  {ready: metav1.ConditionFalse, reason: rollout.AbortedReason, stall: true},
	}[ro.Status.Phase]
	ready := meta.FindStatusCondition(ro.Status.Conditions, fleet.ReadyCondition)
	switch {
	case want.reason == "":
		return nil
	case ready == nil || ready.Status != want.ready || ready.Reason != want.reason || ready.ObservedGeneration != ro.Generation:
		return fmt.Errorf("Ready condition %+v, want %s/%s at generation %d", ready, want.ready, want.reason, ro.Generation)
	case meta.IsStatusConditionTrue(ro.Status.Conditions, fleet.ReconcilingCondition) != want.reconciling,
		meta.IsStatusConditionTrue(ro.Status.Conditions, fleet.StalledCondition) != want.stall:
		return fmt.Errorf("conditions %+v: want Reconciling %v, Stalled %v", ro.Status.Conditions, want.reconciling, want.stall)
	}
	return nil
}

// TestStagedRollout_CanaryHaltsAndRollsBackThenWavesInOrder changes an
// agent setting for twelve agents with a canary, waves of 25% and
// autoRollback: the canary fails on the new revision, the rollout halts
// and puts the canary back while no other agent ever moved; once the
// canary is fixed, `resume` rolls the rest, each wave only after the one
// before is Ready. A Cluster's own redeployAgentGeneration still rolls at
// once. A later revision, paused after its canary, admits nobody else, and
// its abort puts the canary back.
func TestStagedRollout_CanaryHaltsAndRollsBackThenWavesInOrder(t *testing.T) {
	agentsRun := newStandIn(up)
	testenv.Start(t, "stand-in agents", agentsRun.run)
	keys := agents(t)
	canary := keys[0]

	// Revision 0: every agent on it, Ready, recorded by an AgentRollout.
	var rev0 string
	testenv.Eventually(t, 90*time.Second, "every agent on the first revision and Ready", func() error {
		ro, err := rollout.Latest(t.Context(), up)
		if err != nil {
			return err
		}
		if !ro.Status.Current {
			return fmt.Errorf("no AgentRollout is marked current")
		}
		rev0 = ro.Spec.Revision
		for _, k := range keys {
			b, err := tryBundle(t, k)
			if err != nil {
				return err
			}
			if b.Annotations[rollout.RevisionAnnotation] != rev0 {
				return fmt.Errorf("%s on revision %q, want %s", k, b.Annotations[rollout.RevisionAnnotation], rev0)
			}
			if !meta.IsStatusConditionTrue(getCluster(t, k).Status.Conditions, fleet.ReadyCondition) {
				return fmt.Errorf("%s not Ready", k)
			}
		}
		return nil
	})
	before := map[string]*fleet.Bundle{}
	for _, k := range keys {
		before[k] = agentBundle(t, k)
	}

	// Revision 1: two agent replicas, staged; the canary cannot run it.
	agentsRun.set(func(s *standIn) { s.failExcept[canary] = rev0 })
	pct := intstr.FromString("25%")
	cfg1 := baseConfig()
	cfg1.AgentReplicas = ptr.To[int32](2)
	// The canary is selected on env, which agents may therefore not set.
	cfg1.AgentLabelKeys = []string{"region"}
	cfg1.AgentRollout = &fleet.AgentRolloutStrategy{
		Canary:           &fleet.AgentRolloutCanary{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "canary"}}},
		MaxUnavailable:   &pct,
		ProgressDeadline: &metav1.Duration{Duration: 15 * time.Second},
		AutoRollback:     true,
	}
	setConfig(t, cfg1)
	ro := waitRollout(t, "the canary wave halts and the canary goes back", []string{rev0}, func(ro *fleet.AgentRollout) error {
		if ro.Status.Phase != fleet.RolloutHalted || !slices.Equal(ro.Status.RolledBack, []string{canary}) {
			return fmt.Errorf("want Halted with %s rolled back", canary)
		}
		return phaseConditions(ro)
	})
	rev1 := ro.Spec.Revision
	if ro.Spec.PreviousRevision != rev0 {
		t.Fatalf("previous revision %s, want %s", ro.Spec.PreviousRevision, rev0)
	}
	if got := len(ro.Status.Waves); got != 5 || !ro.Status.Waves[0].Canary || !slices.Equal(ro.Status.Waves[0].Clusters, []string{canary}) {
		t.Fatalf("plan %+v: want the canary, then four waves of at most 3", ro.Status.Waves)
	}
	if !agentsRun.wasGiven(rev1, canary) {
		t.Fatal("the canary never got revision 1")
	}
	testenv.Eventually(t, 60*time.Second, "the canary's agent Bundle back as it was", func() error {
		b := agentBundle(t, canary)
		if b.Annotations[rollout.RevisionAnnotation] != rev0 || b.Annotations[cluster.AgentValuesHashAnnotation] != before[canary].Annotations[cluster.AgentValuesHashAnnotation] {
			return fmt.Errorf("canary Bundle on revision %s, values hash %s", b.Annotations[rollout.RevisionAnnotation], b.Annotations[cluster.AgentValuesHashAnnotation])
		}
		if b.Spec.Resources[0].Content != before[canary].Spec.Resources[0].Content {
			return fmt.Errorf("the canary's agent manifests differ from revision 0's")
		}
		cond := meta.FindStatusCondition(getCluster(t, canary).Status.Conditions, fleet.AgentRolloutCondition)
		if cond == nil || cond.Reason != cluster.RolledBackReason {
			return fmt.Errorf("canary AgentRollout condition %+v, want reason %s", cond, cluster.RolledBackReason)
		}
		return nil
	})
	for _, k := range keys[1:] {
		if b := agentBundle(t, k); b.Generation != before[k].Generation || b.Annotations[rollout.RevisionAnnotation] != rev0 {
			t.Fatalf("%s: agent Bundle changed (generation %d→%d, revision %s) while the canary wave failed", k, before[k].Generation, b.Generation, b.Annotations[rollout.RevisionAnnotation])
		}
		if agentsRun.wasGiven(rev1, k) {
			t.Fatalf("%s got revision 1 before the canary passed", k)
		}
		cond := meta.FindStatusCondition(getCluster(t, k).Status.Conditions, fleet.AgentRolloutCondition)
		if cond == nil || cond.Reason != rollout.WaitingForWaveReason {
			t.Fatalf("%s: AgentRollout condition %+v, want reason %s", k, cond, rollout.WaitingForWaveReason)
		}
	}

	// The canary is fixed; resume: every wave in order. The short deadline
	// made the canary fail fast; the waves get one that a loaded machine
	// (the race detector) keeps, as an operator may set it on the rollout.
	agentsRun.set(func(s *standIn) { delete(s.failExcept, canary) })
	if err := up.Patch(t.Context(), ro, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"strategy":{"progressDeadline":"5m"}}}`))); err != nil {
		t.Fatal(err)
	}
	if err := rollout.Resume(t.Context(), up, ro.Name); err != nil {
		t.Fatal(err)
	}
	ro = waitRollout(t, "the rollout completes", []string{rev0}, phase(fleet.RolloutComplete))
	if ro.Status.Updated != clusters || ro.Status.Failed != 0 || ro.Status.Pending != 0 {
		t.Fatalf("counts updated %d failed %d pending %d, want %d/0/0", ro.Status.Updated, ro.Status.Failed, ro.Status.Pending, clusters)
	}
	for i := 1; i < len(ro.Status.Waves); i++ {
		var lastBefore time.Time
		for _, k := range ro.Status.Waves[i-1].Clusters {
			at, _ := agentsRun.seenAt(rev1, k)
			if at.After(lastBefore) {
				lastBefore = at
			}
		}
		for _, k := range ro.Status.Waves[i].Clusters {
			at, ok := agentsRun.seenAt(rev1, k)
			if !ok || at.Before(lastBefore) {
				t.Fatalf("wave %d: %s got revision 1 at %s, before wave %d was Ready (%s)", i+1, k, at.Format(time.StampMilli), i, lastBefore.Format(time.StampMilli))
			}
		}
	}
	testenv.Eventually(t, 30*time.Second, "no Cluster says it waits", func() error {
		for _, k := range keys {
			if cond := meta.FindStatusCondition(getCluster(t, k).Status.Conditions, fleet.AgentRolloutCondition); cond != nil {
				return fmt.Errorf("%s: %+v", k, cond)
			}
		}
		return nil
	})

	// A Cluster's own change rolls that Cluster at once, staged or not.
	own := keys[5]
	genBefore := agentBundle(t, own).Generation
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := getCluster(t, own)
		c.Spec.RedeployAgentGeneration++
		return up.Update(t.Context(), c)
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the Cluster's own generation bump reaches its agent Bundle", func() error {
		if b := agentBundle(t, own); b.Generation == genBefore {
			return fmt.Errorf("agent Bundle unchanged")
		}
		return nil
	})
	if latest, err := rollout.Latest(t.Context(), up); err != nil || latest.Spec.Revision != rev1 {
		t.Fatalf("a Cluster's own change made a new rollout: %v %v", latest, err)
	}

	// Revision 2, paused while its canary is on it: nobody else moves;
	// aborted: the canary goes back to revision 1.
	agentsRun.set(func(s *standIn) { s.hold[canary] = true })
	cfg2 := baseConfig()
	cfg2.AgentLabelKeys = cfg1.AgentLabelKeys
	cfg2.AgentRollout = cfg1.AgentRollout.DeepCopy()
	cfg2.AgentRollout.ProgressDeadline = &metav1.Duration{Duration: 5 * time.Minute}
	cfg2.AgentReplicas = ptr.To[int32](3)
	setConfig(t, cfg2)
	ro = waitRollout(t, "revision 2's rollout starts", []string{rev0, rev1}, func(ro *fleet.AgentRollout) error {
		if len(ro.Status.Waves) == 0 {
			return fmt.Errorf("not planned yet")
		}
		return nil
	})
	rev2 := ro.Spec.Revision
	if err := rollout.Pause(t.Context(), up, ro.Name); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, "paused", []string{rev0, rev1}, phase(fleet.RolloutPaused))
	agentsRun.set(func(s *standIn) { delete(s.hold, canary) })
	testenv.Eventually(t, 60*time.Second, "the canary runs revision 2", func() error {
		if _, ok := agentsRun.seenAt(rev2, canary); !ok {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	testenv.Consistently(t, 3*time.Second, "a paused rollout admits no further wave", func() error {
		for _, k := range keys[1:] {
			if _, ok := agentsRun.seenAt(rev2, k); ok {
				return fmt.Errorf("%s got revision 2 while paused", k)
			}
		}
		return nil
	})
	if err := rollout.Abort(t.Context(), up, ro.Name); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, "aborted", []string{rev0, rev1}, phase(fleet.RolloutAborted))
	testenv.Eventually(t, 60*time.Second, "the canary back on revision 1, everyone else never left it", func() error {
		for _, k := range keys {
			if got := agentBundle(t, k).Annotations[rollout.RevisionAnnotation]; got != rev1 {
				return fmt.Errorf("%s on revision %s, want %s", k, got, rev1)
			}
		}
		return nil
	})
	if err := rollout.Resume(t.Context(), up, ro.Name); err == nil {
		t.Fatal("an aborted rollout resumed")
	}
}
