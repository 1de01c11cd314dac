package rollout

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
)

// Observed is what the reconciler found for one planned Cluster.
type Observed struct {
	// Updated: its agent Bundle is on the rollout's revision, its agent
	// applied it and reports it Ready, and the Cluster is Ready.
	Updated bool
	// Gone: the Cluster was deleted; it no longer holds a wave back.
	Gone bool
}

// Event is something Progress did, for the reconciler to record.
type Event struct {
	Type, Reason, Message string
}

// Inputs of Progress besides the rollout itself.
type Inputs struct {
	// Observed has an entry for every planned Cluster; one missing counts
	// as not updated.
	Observed map[string]Observed
	// CanRollBack: the previous revision's record exists, so Clusters can
	// be put back on it.
	CanRollBack bool
	Now         time.Time
}

// Progress is the rollout's next status: it admits the next wave when the
// current one is updated, halts a wave that missed its deadline (rolling
// its failed Clusters back when the strategy says so), and handles pause,
// resume and abort. It also returns the events to record and, while a
// deadline runs, when to look again.
func Progress(ro *fleet.AgentRollout, in Inputs) (fleet.AgentRolloutStatus, []Event, time.Duration) {
	st, events, after := progress(ro, in)
	count(&st, in.Observed)
	return st, events, after
}

func progress(ro *fleet.AgentRollout, in Inputs) (fleet.AgentRolloutStatus, []Event, time.Duration) {
	st := *ro.Status.DeepCopy()
	st.ObservedGeneration = ro.Generation
	var events []Event
	emit := func(typ, reason, format string, args ...any) {
		events = append(events, Event{Type: typ, Reason: reason, Message: fmt.Sprintf(format, args...)})
	}
	now := metav1.NewTime(in.Now)
	n := len(st.Waves)

	switch st.Phase {
	case fleet.RolloutComplete, fleet.RolloutSuperseded, fleet.RolloutAborted:
		return st, nil, 0
	}
	if st.Phase == "" {
		st.Phase = fleet.RolloutProgressing
		st.WaveStarted = &now
		emit(corev1.EventTypeNormal, "RolloutStarted", "rolling revision %s out to %d clusters in %d waves", short(ro.Spec.Revision), planned(st.Waves), n)
	}
	if ro.Spec.Aborted {
		st.Phase = fleet.RolloutAborted
		st.RolledBack = nil
		if in.CanRollBack {
			for i := 0; i < min(int(st.Wave)+1, n); i++ {
				st.RolledBack = append(st.RolledBack, st.Waves[i].Clusters...)
			}
			st.Message = fmt.Sprintf("aborted at wave %d/%d: %d clusters go back to revision %s", st.Wave, n, len(st.RolledBack), short(ro.Spec.PreviousRevision))
		} else {
			st.Message = fmt.Sprintf("aborted at wave %d/%d: no record of the previous revision, so the updated clusters stay on this one", st.Wave, n)
		}
		emit(corev1.EventTypeWarning, "RolloutAborted", "%s", st.Message)
		return st, events, 0
	}
	if ro.Spec.ResumeGeneration != st.ResumedGeneration {
		st.ResumedGeneration = ro.Spec.ResumeGeneration
		if st.Phase == fleet.RolloutHalted {
			st.Phase = fleet.RolloutProgressing
			st.FailedClusters, st.RolledBack = nil, nil
			st.WaveStarted = &now
			emit(corev1.EventTypeNormal, "RolloutResumed", "retrying wave %d/%d", st.Wave+1, n)
		}
	}
	if st.Phase == fleet.RolloutHalted {
		return st, nil, 0
	}
	if ro.Spec.Paused {
		if st.Phase != fleet.RolloutPaused {
			emit(corev1.EventTypeNormal, "RolloutPaused", "paused before wave %d/%d", st.Wave+1, n)
		}
		st.Phase = fleet.RolloutPaused
		st.Message = fmt.Sprintf("paused: wave %d/%d is admitted, no further wave is until `fleet rollout resume`", min(int(st.Wave)+1, n), n)
		return st, events, 0
	}
	if st.Phase == fleet.RolloutPaused {
		// The deadline counts from the resume, not from before the pause.
		st.Phase = fleet.RolloutProgressing
		st.WaveStarted = &now
		emit(corev1.EventTypeNormal, "RolloutResumed", "resumed at wave %d/%d", st.Wave+1, n)
	}

	for int(st.Wave) < n && waveUpdated(st.Waves[st.Wave], in.Observed) {
		w := st.Waves[st.Wave]
		what := "wave"
		if w.Canary {
			what = "canary wave"
		}
		emit(corev1.EventTypeNormal, "WaveCompleted", "%s %d/%d updated: %d clusters run revision %s and are Ready", what, st.Wave+1, n, len(w.Clusters), short(ro.Spec.Revision))
		st.Wave++
		st.WaveStarted = &now
	}
	if int(st.Wave) == n {
		st.Phase = fleet.RolloutComplete
		st.Completed = &now
		st.Message = fmt.Sprintf("every planned cluster runs revision %s", short(ro.Spec.Revision))
		emit(corev1.EventTypeNormal, "RolloutCompleted", "%s", st.Message)
		return st, events, 0
	}

	w := st.Waves[st.Wave]
	var waiting []string
	for _, k := range w.Clusters {
		if o := in.Observed[k]; !o.Updated && !o.Gone {
			waiting = append(waiting, k)
		}
	}
	if ro.Spec.Strategy == nil {
		st.Message = fmt.Sprintf("%d of %d clusters run revision %s and are Ready", len(w.Clusters)-len(waiting), len(w.Clusters), short(ro.Spec.Revision))
		return st, events, 0
	}
	deadline := config.RolloutProgressDeadline(ro.Spec.Strategy)
	left := st.WaveStarted.Add(deadline).Sub(in.Now)
	if left > 0 {
		st.Message = fmt.Sprintf("wave %d/%d: %d of %d clusters updated, waiting for %s (deadline in %s)",
			st.Wave+1, n, len(w.Clusters)-len(waiting), len(w.Clusters), sample(waiting), left.Round(time.Second))
		return st, events, left
	}
	st.Phase = fleet.RolloutHalted
	st.FailedClusters = waiting
	st.Message = fmt.Sprintf("halted at wave %d/%d: %d clusters did not run revision %s Ready within %s: %s",
		st.Wave+1, n, len(waiting), short(ro.Spec.Revision), deadline, sample(waiting))
	switch {
	case !ro.Spec.Strategy.AutoRollback:
		st.Message += "; `fleet rollout resume` retries the wave, `fleet rollout abort` puts every updated cluster back"
	case in.CanRollBack:
		st.RolledBack = waiting
		st.Message += fmt.Sprintf("; they went back to revision %s", short(ro.Spec.PreviousRevision))
	default:
		st.Message += "; no record of the previous revision, so they cannot go back"
	}
	emit(corev1.EventTypeWarning, "RolloutHalted", "%s", st.Message)
	return st, events, 0
}

func waveUpdated(w fleet.AgentRolloutWave, obs map[string]Observed) bool {
	for _, k := range w.Clusters {
		if o := obs[k]; !o.Updated && !o.Gone {
			return false
		}
	}
	return true
}

// count fills the counters and the display from the plan.
func count(st *fleet.AgentRolloutStatus, obs map[string]Observed) {
	failed := map[string]bool{}
	for _, k := range st.FailedClusters {
		failed[k] = true
	}
	for _, k := range st.RolledBack {
		failed[k] = true
	}
	st.Clusters, st.Updated, st.Pending, st.Failed = 0, 0, 0, 0
	for _, w := range st.Waves {
		for _, k := range w.Clusters {
			o := obs[k]
			switch {
			case o.Gone:
				continue
			case failed[k]:
				st.Failed++
			case o.Updated:
				st.Updated++
			default:
				st.Pending++
			}
			st.Clusters++
		}
	}
	st.Display.Wave = fmt.Sprintf("%d/%d", min(int(st.Wave), len(st.Waves)), len(st.Waves))
}

func planned(waves []fleet.AgentRolloutWave) int {
	n := 0
	for _, w := range waves {
		n += len(w.Clusters)
	}
	return n
}

// sample names up to five clusters.
func sample(keys []string) string {
	if len(keys) <= 5 {
		return strings.Join(keys, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(keys[:5], ", "), len(keys)-5)
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
