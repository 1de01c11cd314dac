package bundlerollout

import (
	"fmt"
	"strings"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/summary"
)

// Step is what one pass does to a target's BundleDeployment.
type Step int

const (
	// Skip: the target has no BundleDeployment and gets none this pass
	// (maxNew reached, or an earlier partition is unavailable).
	Skip Step = iota
	// Keep: the BundleDeployment's deployment in force and its staged one
	// stay as they are (its partition is behind an unavailable one).
	Keep
	// Stage: the Bundle's deployment is staged (stagedDeploymentID,
	// stagedOptions); the one in force stays (a maxUnavailable is reached,
	// or the Bundle or Cluster is paused).
	Stage
	// Deploy: the Bundle's deployment is staged and put in force; a new
	// BundleDeployment is created with it.
	Deploy
)

func (s Step) String() string {
	return [...]string{"Skip", "Keep", "Stage", "Deploy"}[s]
}

// Plan is what one pass does, and the counters it leaves in the Bundle's
// status.
type Plan struct {
	// Steps has one Step per target.
	Steps []Step
	// NewlyCreated counts the BundleDeployments created, at most MaxNew.
	NewlyCreated, MaxNew int
	// Unavailable counts the unavailable BundleDeployments, those the pass
	// puts a new deployment in force on included; MaxUnavailable is the
	// strategy's limit of it over all targets.
	Unavailable, MaxUnavailable int
	// UnavailablePartitions counts the partitions the pass went through
	// that have more unavailable clusters than they allow;
	// MaxUnavailablePartitions is the limit after which it stops.
	UnavailablePartitions, MaxUnavailablePartitions int
	// PartitionUnavailable is each partition's count of clusters not Ready
	// or not on the Bundle's deployment, as the pass leaves them (as first
	// seen for a partition the pass did not reach).
	PartitionUnavailable []int
	// StoppedAt is the partition the pass stopped at because too many
	// partitions were unavailable (-1: it went through all of them).
	StoppedAt int
}

// state is a target's BundleDeployment as the pass leaves it.
type state struct {
	exists, created bool
	current, staged string
	applied         string
	ready           bool
}

// unavailable is Fleet's: not Ready, or not applied at its deployment in
// force. A target without a BundleDeployment is not unavailable.
func (s *state) unavailable() bool {
	return s.exists && (s.applied != s.current || !s.ready)
}

// Decide is one pass of Fleet's rollout over the partitions, in order
// (rancher/fleet target.UpdatePartitions). For each partition:
//
//  1. its targets without a BundleDeployment get one, as long as fewer than
//     maxNew (default 50) were created in this pass; every target with a
//     BundleDeployment has the Bundle's deployment staged;
//  2. a staged deployment is put in force on a target that is not paused
//     when fewer than maxUnavailable clusters of the Bundle, and fewer than
//     the partition's maxUnavailable, are unavailable, or when the target
//     is unavailable itself (a failing cluster always gets the fix); one
//     that was available counts as unavailable from then on;
//  3. the partition is unavailable when more of its clusters than its
//     maxUnavailable are not Ready or not yet applied at the Bundle's
//     deployment; once more partitions than maxUnavailablePartitions
//     (default 0) are unavailable the pass stops, and the later partitions
//     keep their BundleDeployments as they are.
//
// One difference from Fleet: a target whose deployment in force is already
// the Bundle's (a change reverted before it got there) has its staged one
// follow even in a partition the pass does not reach, which changes
// nothing in force and keeps it from showing OutOfSync.
//
// With the defaults (maxUnavailable 100 %) no partition is ever unavailable
// (a partition's unavailable clusters never exceed its size), so a change
// reaches every cluster in one pass, as in Fleet.
func Decide(s *fleet.RolloutStrategy, targets []Target, parts []Partition) (Plan, error) {
	if s == nil {
		s = &fleet.RolloutStrategy{}
	}
	maxNew := DefaultMaxNew
	if s.MaxNew != nil {
		maxNew = *s.MaxNew
	}
	p := Plan{Steps: make([]Step, len(targets)), MaxNew: maxNew, PartitionUnavailable: make([]int, len(parts)), StoppedAt: -1}
	var err error
	if p.MaxUnavailable, err = limit(len(targets), limitValue{"spec.rolloutStrategy.maxUnavailable", s.MaxUnavailable}, limitValue{"", &DefaultMaxUnavailable}); err != nil {
		return p, err
	}
	if p.MaxUnavailablePartitions, err = limit(len(parts), limitValue{"spec.rolloutStrategy.maxUnavailablePartitions", s.MaxUnavailablePartitions}, limitValue{"", &DefaultMaxUnavailablePartitions}); err != nil {
		return p, err
	}
	states := make([]state, len(targets))
	for i, t := range targets {
		if bd := t.Deployment; bd != nil {
			states[i] = state{exists: true, current: bd.Spec.DeploymentID, staged: bd.Spec.StagedDeploymentID, applied: bd.Status.AppliedDeploymentID, ready: bd.Status.Ready}
			if states[i].unavailable() {
				p.Unavailable++
			}
		}
	}
	for pi, part := range parts {
		for _, i := range part.Targets {
			if states[i].unavailable() {
				p.PartitionUnavailable[pi]++
			}
		}
	}
	for pi, part := range parts {
		for _, i := range part.Targets {
			st := &states[i]
			if !st.exists && p.NewlyCreated < p.MaxNew {
				p.NewlyCreated++
				*st = state{exists: true, created: true}
			}
			if st.exists {
				st.staged = targets[i].DeploymentID
			}
		}
		for _, i := range part.Targets {
			st := &states[i]
			if !st.exists || targets[i].Paused || st.staged == "" || st.current == st.staged {
				continue
			}
			was := st.unavailable()
			if !was && (p.Unavailable >= p.MaxUnavailable || p.PartitionUnavailable[pi] >= part.MaxUnavailable) {
				continue
			}
			if !was {
				p.Unavailable++
				p.PartitionUnavailable[pi]++
			}
			st.current = st.staged
		}
		// A partition's clusters count as unavailable until they run the
		// Bundle's deployment and are Ready.
		p.PartitionUnavailable[pi] = 0
		for _, i := range part.Targets {
			st := &states[i]
			if !st.exists || st.unavailable() || st.current != targets[i].DeploymentID || st.applied != targets[i].DeploymentID {
				p.PartitionUnavailable[pi]++
			}
		}
		if p.PartitionUnavailable[pi] > part.MaxUnavailable {
			p.UnavailablePartitions++
		}
		if p.UnavailablePartitions > p.MaxUnavailablePartitions {
			p.StoppedAt = pi
			break
		}
	}
	for i, t := range targets {
		st := &states[i]
		switch {
		case st.created:
			p.Steps[i] = Deploy
		case !st.exists:
			p.Steps[i] = Skip
		case st.current != currentOf(t):
			p.Steps[i] = Deploy
		case st.staged != stagedOf(t):
			p.Steps[i] = Stage
		case currentOf(t) == t.DeploymentID && stagedOf(t) != t.DeploymentID:
			// Already on the Bundle's deployment (a change reverted before
			// it got here): staging it changes nothing in force, and the
			// BundleDeployment stops showing OutOfSync.
			p.Steps[i] = Stage
		default:
			p.Steps[i] = Keep
		}
	}
	return p, nil
}

func currentOf(t Target) string {
	if t.Deployment == nil {
		return ""
	}
	return t.Deployment.Spec.DeploymentID
}

func stagedOf(t Target) string {
	if t.Deployment == nil {
		return ""
	}
	return t.Deployment.Spec.StagedDeploymentID
}

// Held counts the targets the pass leaves without the Bundle's deployment
// in force for the rollout's sake: not created (maxNew, an unavailable
// partition before theirs), or kept on their previous deployment. Paused
// targets are not counted: they wait for their pause.
func (p *Plan) Held(targets []Target) int {
	n := 0
	for i, t := range targets {
		switch p.Steps[i] {
		case Skip:
			n++
		case Keep, Stage:
			if !t.Paused && currentOf(t) != t.DeploymentID {
				n++
			}
		}
	}
	return n
}

// Statuses are the partitions' statuses: their size and limit, the
// unavailable clusters the plan leaves, and a summary of their
// BundleDeployments as written (bds has one entry per target; nil: none,
// counted Pending).
func Statuses(parts []Partition, p Plan, bds []*fleet.BundleDeployment) []fleet.PartitionStatus {
	out := make([]fleet.PartitionStatus, len(parts))
	for pi, part := range parts {
		var list []fleet.BundleDeployment
		pending := 0
		for _, i := range part.Targets {
			if bds[i] == nil {
				pending++
				continue
			}
			list = append(list, *bds[i])
		}
		s := summary.Summarize(list)
		s.Pending += pending
		s.DesiredReady = len(part.Targets)
		out[pi] = fleet.PartitionStatus{Name: part.Name, Count: len(part.Targets), MaxUnavailable: part.MaxUnavailable, Unavailable: p.PartitionUnavailable[pi], Summary: s}
	}
	return out
}

// Message says why the rollout holds clusters back, for the Bundle's Ready
// condition: the partition it stopped at, the unavailable partitions with
// how many of their clusters are unavailable and what their
// BundleDeployments report, and how many clusters keep their previous
// deployment. held is p.Held(targets); statuses are Statuses(...).
func (p *Plan) Message(statuses []fleet.PartitionStatus, held int) string {
	var b strings.Builder
	switch {
	case p.StoppedAt >= 0:
		fmt.Fprintf(&b, "rollout stopped at partition %s: %d unavailable partition(s), at most %d allowed", partitionName(statuses, p.StoppedAt), p.UnavailablePartitions, p.MaxUnavailablePartitions)
	case p.Unavailable >= p.MaxUnavailable:
		fmt.Fprintf(&b, "rollout held: %d cluster(s) unavailable, at most %d allowed", p.Unavailable, p.MaxUnavailable)
	case p.NewlyCreated >= p.MaxNew:
		fmt.Fprintf(&b, "rollout in progress: %d BundleDeployment(s) created in this pass, at most %d (maxNew)", p.NewlyCreated, p.MaxNew)
	default:
		fmt.Fprintf(&b, "rollout in progress")
	}
	for pi, st := range statuses {
		if st.Unavailable <= st.MaxUnavailable || (p.StoppedAt >= 0 && pi > p.StoppedAt) {
			continue
		}
		fmt.Fprintf(&b, "; partition %s: %d of %d cluster(s) unavailable, at most %d allowed", partitionName(statuses, pi), st.Unavailable, st.Count, st.MaxUnavailable)
		if m := summary.ReadyMessage(st.Summary); m != "" {
			fmt.Fprintf(&b, " (%s)", m)
		}
	}
	fmt.Fprintf(&b, "; %d cluster(s) wait for the Bundle's current deployment", held)
	return b.String()
}

// partitionName names a partition in messages: its name, or its place.
func partitionName(statuses []fleet.PartitionStatus, i int) string {
	if statuses[i].Name != "" {
		return fmt.Sprintf("%q", statuses[i].Name)
	}
	return fmt.Sprintf("#%d", i+1)
}
