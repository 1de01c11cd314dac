package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

func cands(n int) []Candidate {
	out := make([]Candidate, n)
	for i := range out {
		out[i] = Candidate{Key: fmt.Sprintf("ws-%d/c-%03d", i%3, i), Labels: map[string]string{}}
	}
	return out
}

func sizes(waves []fleet.AgentRolloutWave) []int {
	var out []int
	for _, w := range waves {
		out = append(out, len(w.Clusters))
	}
	return out
}

func TestPlan_WavesOfMaxUnavailableAfterTheCanary(t *testing.T) {
	pct := intstr.FromString("10%")
	three := intstr.FromInt32(3)
	for _, tc := range []struct {
		name     string
		n        int
		strategy *fleet.AgentRolloutStrategy
		want     []int
	}{
		{"no strategy: one wave", 25, nil, []int{25}},
		{"10% of 25 rounds up to 3", 25, &fleet.AgentRolloutStrategy{MaxUnavailable: &pct}, []int{3, 3, 3, 3, 3, 3, 3, 3, 1}},
		{"canary of 1, then 10% of 1000", 1000, &fleet.AgentRolloutStrategy{Canary: &fleet.AgentRolloutCanary{Count: 1}, MaxUnavailable: &pct}, []int{1, 100, 100, 100, 100, 100, 100, 100, 100, 100, 99}},
		{"count", 7, &fleet.AgentRolloutStrategy{MaxUnavailable: &three}, []int{3, 3, 1}},
		{"canary only: the rest in one wave", 5, &fleet.AgentRolloutStrategy{Canary: &fleet.AgentRolloutCanary{Count: 2}}, []int{2, 3}},
		{"nobody", 0, &fleet.AgentRolloutStrategy{MaxUnavailable: &three}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waves, err := Plan(cands(tc.n), tc.strategy)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, sizes(waves)); diff != "" {
				t.Fatalf("wave sizes (-want +got):\n%s", diff)
			}
			seen := map[string]bool{}
			for _, w := range waves {
				for _, k := range w.Clusters {
					if seen[k] {
						t.Fatalf("%s planned twice", k)
					}
					seen[k] = true
				}
			}
			if len(seen) != tc.n {
				t.Fatalf("planned %d clusters, want all %d", len(seen), tc.n)
			}
			again, _ := Plan(cands(tc.n), tc.strategy)
			if diff := cmp.Diff(waves, again); diff != "" {
				t.Fatalf("the same clusters gave another plan:\n%s", diff)
			}
		})
	}
}

func TestPlan_CanaryBySelectorAndByCountPrefersClustersToUpdate(t *testing.T) {
	cs := cands(10)
	cs[4].Labels["env"] = "canary"
	cs[7].Labels["env"] = "canary"
	waves, err := Plan(cs, &fleet.AgentRolloutStrategy{Canary: &fleet.AgentRolloutCanary{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "canary"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !waves[0].Canary || strings.Join(waves[0].Clusters, ",") != "ws-1/c-004,ws-1/c-007" && strings.Join(waves[0].Clusters, ",") != "ws-1/c-007,ws-1/c-004" {
		t.Fatalf("canary wave %+v, want the two labelled clusters", waves[0])
	}
	// By count: a Cluster already on the revision proves nothing.
	cs = cands(4)
	for i := range cs {
		cs[i].Current = i != 2
	}
	waves, err = Plan(cs, &fleet.AgentRolloutStrategy{Canary: &fleet.AgentRolloutCanary{Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if got := waves[0].Clusters; len(got) != 1 || got[0] != cs[2].Key {
		t.Fatalf("canary %v, want the one cluster still to update (%s)", got, cs[2].Key)
	}
}

// rollout is a rollout of three waves (a canary of one, then two of two).
func rolloutOf(strategy *fleet.AgentRolloutStrategy, started time.Time) *fleet.AgentRollout {
	return &fleet.AgentRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-abc", Generation: 1},
		Spec:       fleet.AgentRolloutSpec{Revision: "abc", PreviousRevision: "old", Strategy: strategy},
		Status: fleet.AgentRolloutStatus{
			Phase:       fleet.RolloutProgressing,
			WaveStarted: &metav1.Time{Time: started},
			Waves: []fleet.AgentRolloutWave{
				{Canary: true, Clusters: []string{"ws/a"}},
				{Clusters: []string{"ws/b", "ws/c"}},
				{Clusters: []string{"ws/d", "ws/e"}},
			},
		},
	}
}

func obs(updated ...string) map[string]Observed {
	m := map[string]Observed{}
	for _, k := range []string{"ws/a", "ws/b", "ws/c", "ws/d", "ws/e"} {
		m[k] = Observed{}
	}
	for _, k := range updated {
		m[k] = Observed{Updated: true}
	}
	return m
}

func TestProgress(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	staged := &fleet.AgentRolloutStrategy{Canary: &fleet.AgentRolloutCanary{Count: 1}, ProgressDeadline: &metav1.Duration{Duration: 5 * time.Minute}, AutoRollback: true}
	noRollback := staged.DeepCopy()
	noRollback.AutoRollback = false
	for _, tc := range []struct {
		name        string
		ro          func() *fleet.AgentRollout
		obs         map[string]Observed
		canRollBack bool
		now         time.Duration
		wantPhase   string
		wantWave    int32
		wantCounts  [4]int32 // clusters, updated, pending, failed
		wantBack    []string
		wantReasons []string
		wantAfter   time.Duration
	}{{
		name: "the canary is not ready yet: wait, with the deadline's remainder",
		ro:   func() *fleet.AgentRollout { return rolloutOf(staged, t0) }, obs: obs(), now: time.Minute,
		wantPhase: fleet.RolloutProgressing, wantCounts: [4]int32{5, 0, 5, 0}, wantAfter: 4 * time.Minute,
	}, {
		name: "the canary is updated: the next wave is admitted",
		ro:   func() *fleet.AgentRollout { return rolloutOf(staged, t0) }, obs: obs("ws/a"), now: time.Minute,
		wantPhase: fleet.RolloutProgressing, wantWave: 1, wantCounts: [4]int32{5, 1, 4, 0}, wantReasons: []string{"WaveCompleted"}, wantAfter: 5 * time.Minute,
	}, {
		name: "every wave updated: complete",
		ro:   func() *fleet.AgentRollout { return rolloutOf(staged, t0) }, obs: obs("ws/a", "ws/b", "ws/c", "ws/d", "ws/e"), now: time.Minute,
		wantPhase: fleet.RolloutComplete, wantWave: 3, wantCounts: [4]int32{5, 5, 0, 0}, wantReasons: []string{"WaveCompleted", "WaveCompleted", "WaveCompleted", "RolloutCompleted"},
	}, {
		name: "a later wave's cluster updated early does not skip the wave in progress",
		ro:   func() *fleet.AgentRollout { return rolloutOf(staged, t0) }, obs: obs("ws/b", "ws/c"), now: time.Minute,
		wantPhase: fleet.RolloutProgressing, wantCounts: [4]int32{5, 2, 3, 0}, wantAfter: 4 * time.Minute,
	}, {
		name: "the canary misses its deadline: halted, and put back",
		ro:   func() *fleet.AgentRollout { return rolloutOf(staged, t0) }, obs: obs(), canRollBack: true, now: 5 * time.Minute,
		wantPhase: fleet.RolloutHalted, wantCounts: [4]int32{5, 0, 4, 1}, wantBack: []string{"ws/a"}, wantReasons: []string{"RolloutHalted"},
	}, {
		name: "halted without autoRollback: the failed cluster stays",
		ro:   func() *fleet.AgentRollout { return rolloutOf(noRollback, t0) }, obs: obs(), canRollBack: true, now: 6 * time.Minute,
		wantPhase: fleet.RolloutHalted, wantCounts: [4]int32{5, 0, 4, 1}, wantReasons: []string{"RolloutHalted"},
	}, {
		name: "halted with autoRollback but no record of the previous revision: nobody goes back",
		ro:   func() *fleet.AgentRollout { return rolloutOf(staged, t0) }, obs: obs(), now: 6 * time.Minute,
		wantPhase: fleet.RolloutHalted, wantCounts: [4]int32{5, 0, 4, 1}, wantReasons: []string{"RolloutHalted"},
	}, {
		name: "a halted rollout stays halted when its cluster recovers",
		ro: func() *fleet.AgentRollout {
			ro := rolloutOf(staged, t0)
			ro.Status.Phase, ro.Status.FailedClusters, ro.Status.RolledBack, ro.Status.Message = fleet.RolloutHalted, []string{"ws/a"}, []string{"ws/a"}, "halted"
			return ro
		},
		obs: obs("ws/a"), now: 7 * time.Minute,
		wantPhase: fleet.RolloutHalted, wantCounts: [4]int32{5, 0, 4, 1}, wantBack: []string{"ws/a"},
	}, {
		name: "resume retries the halted wave with a fresh deadline",
		ro: func() *fleet.AgentRollout {
			ro := rolloutOf(staged, t0)
			ro.Status.Phase, ro.Status.FailedClusters, ro.Status.RolledBack, ro.Status.Message = fleet.RolloutHalted, []string{"ws/a"}, []string{"ws/a"}, "halted"
			ro.Spec.ResumeGeneration = 1
			return ro
		},
		obs: obs(), now: 7 * time.Minute,
		wantPhase: fleet.RolloutProgressing, wantCounts: [4]int32{5, 0, 5, 0}, wantReasons: []string{"RolloutResumed"}, wantAfter: 5 * time.Minute,
	}, {
		name: "paused: no further wave, however ready",
		ro: func() *fleet.AgentRollout {
			ro := rolloutOf(staged, t0)
			ro.Spec.Paused = true
			return ro
		},
		obs: obs("ws/a", "ws/b", "ws/c"), now: 10 * time.Minute,
		wantPhase: fleet.RolloutPaused, wantCounts: [4]int32{5, 3, 2, 0}, wantReasons: []string{"RolloutPaused"},
	}, {
		name: "aborted: every admitted cluster goes back",
		ro: func() *fleet.AgentRollout {
			ro := rolloutOf(staged, t0)
			ro.Status.Wave = 1
			ro.Spec.Aborted = true
			return ro
		},
		obs: obs("ws/a", "ws/b"), canRollBack: true, now: time.Minute,
		wantPhase: fleet.RolloutAborted, wantWave: 1, wantCounts: [4]int32{5, 0, 2, 3}, wantBack: []string{"ws/a", "ws/b", "ws/c"}, wantReasons: []string{"RolloutAborted"},
	}, {
		name: "a deleted cluster holds no wave back",
		ro:   func() *fleet.AgentRollout { return rolloutOf(staged, t0) }, obs: func() map[string]Observed { m := obs(); m["ws/a"] = Observed{Gone: true}; return m }(), now: time.Minute,
		wantPhase: fleet.RolloutProgressing, wantWave: 1, wantCounts: [4]int32{4, 0, 4, 0}, wantReasons: []string{"WaveCompleted"}, wantAfter: 5 * time.Minute,
	}, {
		name: "no strategy: one wave, no deadline",
		ro: func() *fleet.AgentRollout {
			ro := rolloutOf(nil, t0)
			ro.Status.Waves = []fleet.AgentRolloutWave{{Clusters: []string{"ws/a", "ws/b", "ws/c", "ws/d", "ws/e"}}}
			return ro
		},
		obs: obs("ws/a"), now: 24 * time.Hour,
		wantPhase: fleet.RolloutProgressing, wantCounts: [4]int32{5, 1, 4, 0},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ro := tc.ro()
			st, events, after := Progress(ro, Inputs{Observed: tc.obs, CanRollBack: tc.canRollBack, Now: t0.Add(tc.now)})
			if st.Phase != tc.wantPhase || st.Wave != tc.wantWave {
				t.Fatalf("phase %s wave %d (%s), want %s wave %d", st.Phase, st.Wave, st.Message, tc.wantPhase, tc.wantWave)
			}
			if got := [4]int32{st.Clusters, st.Updated, st.Pending, st.Failed}; got != tc.wantCounts {
				t.Fatalf("clusters/updated/pending/failed %v, want %v (%s)", got, tc.wantCounts, st.Message)
			}
			if diff := cmp.Diff(tc.wantBack, st.RolledBack); diff != "" {
				t.Fatalf("rolled back (-want +got):\n%s", diff)
			}
			var reasons []string
			for _, e := range events {
				reasons = append(reasons, e.Reason)
			}
			if diff := cmp.Diff(tc.wantReasons, reasons); diff != "" {
				t.Fatalf("events (-want +got):\n%s", diff)
			}
			if after != tc.wantAfter {
				t.Fatalf("look again after %s, want %s", after, tc.wantAfter)
			}
			if st.Message == "" {
				t.Fatal("no message")
			}
		})
	}
}

func TestAffected_NewWaveAndRollbacksOnly(t *testing.T) {
	old := rolloutOf(nil, time.Now())
	cur := old.DeepCopy()
	cur.Status.Wave = 1
	cur.ResourceVersion = "2"
	if diff := cmp.Diff(map[string]bool{"ws/b": true, "ws/c": true}, affected(old, cur)); diff != "" {
		t.Fatalf("admitting wave 2 (-want +got):\n%s", diff)
	}
	counted := cur.DeepCopy()
	counted.Status.Updated = 2
	if got := affected(cur, counted); len(got) != 0 {
		t.Fatalf("a count changed, and %v were reconciled", got)
	}
	back := cur.DeepCopy()
	back.Status.RolledBack = []string{"ws/b"}
	if diff := cmp.Diff(map[string]bool{"ws/b": true}, affected(cur, back)); diff != "" {
		t.Fatalf("a rollback (-want +got):\n%s", diff)
	}
	done := cur.DeepCopy()
	done.Status.Phase = fleet.RolloutComplete
	if got := affected(cur, done); len(got) != 5 {
		t.Fatalf("completion reconciled %v, want all 5 planned", got)
	}
	if got := affected(nil, old); len(got) != 1 || !got["ws/a"] {
		t.Fatalf("a new rollout reconciled %v, want its first wave", got)
	}
}
