// Package bundlerollout gives a Bundle's spec.rolloutStrategy Fleet's
// meaning: it splits the clusters a Bundle targets into partitions and
// decides, in each pass of the Bundle reconciler, which BundleDeployments
// are created, which get the Bundle's new deployment and which only have it
// staged (spec.stagedDeploymentID) while they keep the one in force.
//
// Like Fleet's, the rollout keeps no state of its own: every pass decides
// again from the BundleDeployments as they are (their deployment in force,
// and what the agents report), so a controller restart or a Bundle change
// mid-rollout needs nothing special. Partitions, the plan and the status
// are pure functions (Partitions, Decide, Statuses), table-tested without
// an API server; controller/bundle writes what they decide.
package bundlerollout

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/targeting"
)

// Fleet's defaults (rancher/fleet internal/cmd/controller/target).
var (
	// DefaultMaxUnavailable: the rollout is not held back at all.
	DefaultMaxUnavailable = intstr.FromString("100%")
	// DefaultAutoPartitionSize is the size of automatic partitions.
	DefaultAutoPartitionSize = intstr.FromString("25%")
	// DefaultMaxUnavailablePartitions: the rollout stops at the first
	// unavailable partition.
	DefaultMaxUnavailablePartitions = intstr.FromInt32(0)
)

const (
	// DefaultAutoPartitionThreshold: fewer targeted clusters make one
	// partition.
	DefaultAutoPartitionThreshold = 200
	// DefaultMaxNew is how many BundleDeployments one pass creates.
	DefaultMaxNew = 50
)

// Target is one cluster a Bundle targets, as the rollout sees it.
type Target struct {
	Cluster *fleet.Cluster
	// DeploymentID is the deployment the Bundle gives the cluster now.
	DeploymentID string
	// Deployment is the cluster's BundleDeployment as last read; nil when
	// it has none yet.
	Deployment *fleet.BundleDeployment
	// Paused: the Bundle or the Cluster is paused, so a new deployment is
	// only staged.
	Paused bool
}

// Partition is a set of targets the rollout moves through together.
type Partition struct {
	// Name is the partition's name (Fleet's: "All", "Partition 0 - 25",
	// or the name given in spec.rolloutStrategy.partitions).
	Name string
	// MaxUnavailable is the partition's limit in clusters.
	MaxUnavailable int
	// Targets are indexes into the targets, in their order.
	Targets []int
}

// Partitions splits the targets, in their order (the Bundle reconciler
// orders them by cluster name, as Fleet does), into the partitions of the
// strategy s (nil: Fleet's defaults):
//
//   - with spec.rolloutStrategy.partitions, one partition per entry, in
//     order, with the targets it selects (a cluster two entries select is
//     in both, as in Fleet); the targets no entry selects follow, split by
//     the automatic rule below into partitions named "Unmatched" (one) or
//     "Unmatched <from> - <to>";
//   - without, automatically: one partition "All" when there are fewer
//     targets than autoPartitionThreshold (default 200; 0 or less, or an
//     autoPartitionSize of 0 or less, turns automatic partitions off),
//     else consecutive partitions of autoPartitionSize targets (default
//     25 %), named "Partition <from> - <to>".
//
// A partition's maxUnavailable is its own, else the strategy's, else
// 100 %, of its size (see limit).
func Partitions(s *fleet.RolloutStrategy, targets []Target, groups targeting.Groups) ([]Partition, error) {
	if s == nil {
		s = &fleet.RolloutStrategy{}
	}
	all := make([]int, len(targets))
	for i := range all {
		all[i] = i
	}
	if len(s.Partitions) == 0 {
		return autoPartitions(s, all, "All", "Partition")
	}
	var parts []Partition
	matched := make([]bool, len(targets))
	for pi := range s.Partitions {
		def := &s.Partitions[pi]
		var in []int
		for i, t := range targets {
			ok, err := targeting.PartitionSelects(pi, def, t.Cluster, groups)
			if err != nil {
				return nil, err
			}
			if ok {
				in = append(in, i)
				matched[i] = true
			}
		}
		mu, err := limit(len(in),
			limitValue{fmt.Sprintf("spec.rolloutStrategy.partitions[%d].maxUnavailable", pi), def.MaxUnavailable},
			limitValue{"spec.rolloutStrategy.maxUnavailable", s.MaxUnavailable},
			limitValue{"", &DefaultMaxUnavailable})
		if err != nil {
			return nil, err
		}
		parts = append(parts, Partition{Name: def.Name, MaxUnavailable: mu, Targets: in})
	}
	var rest []int
	for i := range targets {
		if !matched[i] {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 {
		return parts, nil
	}
	more, err := autoPartitions(s, rest, "Unmatched", "Unmatched")
	return append(parts, more...), err
}

// autoPartitions splits the targets by autoPartitionThreshold and
// autoPartitionSize.
func autoPartitions(s *fleet.RolloutStrategy, targets []int, single, prefix string) ([]Partition, error) {
	threshold := DefaultAutoPartitionThreshold
	if s.AutoPartitionThreshold != nil {
		threshold = *s.AutoPartitionThreshold
	}
	off := s.AutoPartitionSize != nil && s.AutoPartitionSize.Type == intstr.Int && s.AutoPartitionSize.IntVal <= 0
	if off || threshold <= 0 || len(targets) < threshold {
		p, err := partition(s, single, targets)
		return []Partition{p}, err
	}
	size, err := limit(len(targets), limitValue{"spec.rolloutStrategy.autoPartitionSize", s.AutoPartitionSize}, limitValue{"", &DefaultAutoPartitionSize})
	if err != nil {
		return nil, err
	}
	var parts []Partition
	for from := 0; from < len(targets); from += size {
		to := min(from+size, len(targets))
		p, err := partition(s, fmt.Sprintf("%s %d - %d", prefix, from, to), targets[from:to])
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	return parts, nil
}

func partition(s *fleet.RolloutStrategy, name string, targets []int) (Partition, error) {
	mu, err := limit(len(targets), limitValue{"spec.rolloutStrategy.maxUnavailable", s.MaxUnavailable}, limitValue{"", &DefaultMaxUnavailable})
	return Partition{Name: name, MaxUnavailable: mu, Targets: targets}, err
}

// limitValue is a limit as the user gave it, and where (the error names the
// field).
type limitValue struct {
	field string
	v     *intstr.IntOrString
}

// limit is Fleet's reading of a number-or-percentage limit of count items:
// the first value given counts. A number is capped to [0, count]; a string
// holding a whole number is taken as it is, uncapped; a percentage is
// count*p/100 rounded down, but at least 1 (so "0%" allows one) and at most
// count. With count 0 the limit is 1. Anything else is an error naming the
// field, whatever count is (Fleet only notices when count > 0).
func limit(count int, vals ...limitValue) (int, error) {
	var lv limitValue
	for _, v := range vals {
		if v.v != nil {
			lv = v
			break
		}
	}
	if lv.v == nil {
		lv.v = &DefaultMaxUnavailable
	}
	v := lv.v
	if v.Type == intstr.Int {
		if count <= 0 {
			return 1, nil
		}
		return max(0, min(int(v.IntVal), count)), nil
	}
	if i, err := strconv.Atoi(v.StrVal); err == nil && i > 0 {
		if count <= 0 {
			return 1, nil
		}
		return i, nil
	}
	pct, ok := strings.CutSuffix(v.StrVal, "%")
	p, err := strconv.ParseFloat(pct, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("%s: %q is neither a number nor a percentage (like 25%%)", lv.field, v.StrVal)
	}
	if count <= 0 || p <= 0 {
		return 1, nil
	}
	return max(1, min(int(float64(count)*p)/100, count)), nil
}
