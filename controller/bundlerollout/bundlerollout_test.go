package bundlerollout

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/targeting"
)

func ios(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
func ioi(i int) *intstr.IntOrString    { v := intstr.FromInt(i); return &v }

func TestLimit_ReadsNumbersAndPercentagesAsFleetDoes(t *testing.T) {
	for _, tc := range []struct {
		count int
		v     *intstr.IntOrString
		want  int
		err   string
	}{
		{count: 10, v: nil, want: 10}, // default 100 %
		{count: 10, v: ioi(3), want: 3},
		{count: 10, v: ioi(20), want: 10},   // capped to count
		{count: 10, v: ioi(-1), want: 0},    // at least 0
		{count: 10, v: ios("25%"), want: 2}, // rounded down
		{count: 10, v: ios("1%"), want: 1},  // at least 1
		{count: 10, v: ios("0%"), want: 1},  // Fleet: a percentage allows at least one
		{count: 10, v: ios("150%"), want: 10},
		{count: 1000, v: ios("10%"), want: 100},
		{count: 3, v: ios("5"), want: 5}, // Fleet: a number in a string is not capped
		{count: 0, v: ioi(0), want: 1},   // Fleet: nothing to count allows one
		{count: 10, v: ios("ten"), err: `spec.rolloutStrategy.maxUnavailable: "ten" is neither a number nor a percentage`},
		{count: 10, v: ios("0"), err: `"0" is neither`}, // Fleet refuses a zero in a string
		{count: 10, v: ios("x%"), err: `"x%" is neither`},
		{count: 0, v: ios("ten"), err: `"ten" is neither`}, // refused even with nothing to count
		{count: 0, v: ios("10%"), want: 1},
	} {
		got, err := limit(tc.count, limitValue{"spec.rolloutStrategy.maxUnavailable", tc.v}, limitValue{"", &DefaultMaxUnavailable})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("limit(%d, %v) = %d, %v; want error %q", tc.count, tc.v, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("limit(%d, %v) = %d, %v; want %d", tc.count, tc.v, got, err, tc.want)
		}
	}
}

// cluster makes a Cluster named name with labels "k=v,..." .
func cluster(name string, kv ...string) *fleet.Cluster {
	l := map[string]string{}
	for _, p := range kv {
		k, v, _ := strings.Cut(p, "=")
		l[k] = v
	}
	return &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

// targetsNamed makes n targets c-000, c-001, ... without BundleDeployments.
func targetsNamed(n int) []Target {
	out := make([]Target, n)
	for i := range out {
		out[i] = Target{Cluster: cluster(fmt.Sprintf("c-%03d", i)), DeploymentID: "v2"}
	}
	return out
}

// shape is a partition as the tests compare it: name, limit, cluster names.
type shape struct {
	name     string
	max      int
	clusters string
}

func shapes(parts []Partition, targets []Target) []shape {
	var out []shape
	for _, p := range parts {
		var names []string
		for _, i := range p.Targets {
			names = append(names, targets[i].Cluster.Name)
		}
		out = append(out, shape{p.Name, p.MaxUnavailable, strings.Join(names, ",")})
	}
	return out
}

func TestPartitions_AutomaticBySizeAboveTheThreshold(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *fleet.RolloutStrategy
		n    int
		want []string // "name/max/count"
	}{
		{name: "no strategy, few clusters: one partition", s: nil, n: 3, want: []string{"All/3/3"}},
		{name: "199 clusters stay below the default threshold", s: nil, n: 199, want: []string{"All/199/199"}},
		{name: "200 clusters: four partitions of 25%", s: nil, n: 200,
			want: []string{"Partition 0 - 50/50/50", "Partition 50 - 100/50/50", "Partition 100 - 150/50/50", "Partition 150 - 200/50/50"}},
		{name: "1000 clusters, 20%: five partitions with the strategy's maxUnavailable", n: 1000,
			s:    &fleet.RolloutStrategy{AutoPartitionSize: ios("20%"), MaxUnavailable: ios("10%")},
			want: []string{"Partition 0 - 200/20/200", "Partition 200 - 400/20/200", "Partition 400 - 600/20/200", "Partition 600 - 800/20/200", "Partition 800 - 1000/20/200"}},
		{name: "a number as size, the last partition smaller", n: 5,
			s:    &fleet.RolloutStrategy{AutoPartitionThreshold: ptr.To(5), AutoPartitionSize: ioi(2), MaxUnavailable: ioi(1)},
			want: []string{"Partition 0 - 2/1/2", "Partition 2 - 4/1/2", "Partition 4 - 5/1/1"}},
		{name: "autoPartitionSize 0 turns automatic partitions off", n: 300,
			s: &fleet.RolloutStrategy{AutoPartitionSize: ioi(0)}, want: []string{"All/300/300"}},
		{name: "autoPartitionThreshold 0 turns automatic partitions off", n: 300,
			s: &fleet.RolloutStrategy{AutoPartitionThreshold: ptr.To(0)}, want: []string{"All/300/300"}},
		{name: "no cluster: one empty partition", n: 0, want: []string{"All/1/0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			targets := targetsNamed(tc.n)
			parts, err := Partitions(tc.s, targets, targeting.Groups{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range parts {
				got = append(got, fmt.Sprintf("%s/%d/%d", p.Name, p.MaxUnavailable, len(p.Targets)))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("partitions %v, want %v", got, tc.want)
			}
			// In order: the partitions are consecutive runs of the targets.
			next := 0
			for _, p := range parts {
				for _, i := range p.Targets {
					if i != next {
						t.Fatalf("target %d where %d was due", i, next)
					}
					next++
				}
			}
		})
	}
}

func TestPartitions_ListedInOrderThenTheUnmatched(t *testing.T) {
	targets := []Target{
		{Cluster: cluster("a", "env=canary")},
		{Cluster: cluster("b", "env=prod", "region=eu")},
		{Cluster: cluster("c", "env=prod", "region=us")},
		{Cluster: cluster("d", "env=dev", "gold=yes")},
		{Cluster: cluster("e", "env=dev")},
		{Cluster: cluster("f")},
	}
	groups := targeting.Groups{Items: []fleet.ClusterGroup{
		{ObjectMeta: metav1.ObjectMeta{Name: "gold", Labels: map[string]string{"tier": "gold"}},
			Spec: fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"gold": "yes"}}}},
	}}
	s := &fleet.RolloutStrategy{
		MaxUnavailable: ioi(1),
		Partitions: []fleet.Partition{
			{Name: "canary", ClusterName: "a", MaxUnavailable: ioi(0)},
			{Name: "eu", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}},
			{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}, MaxUnavailable: ios("50%")},
			{Name: "gold", ClusterGroup: "gold"},
			{Name: "gold by labels", ClusterGroupSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}},
			{Name: "selects nothing"},
		},
	}
	parts, err := Partitions(s, targets, groups)
	if err != nil {
		t.Fatal(err)
	}
	want := []shape{
		{"canary", 0, "a"},
		{"eu", 1, "b"},
		{"prod", 1, "b,c"}, // b is in two partitions, as in Fleet
		{"gold", 1, "d"},
		{"gold by labels", 1, "d"},
		{"selects nothing", 1, ""},
		{"Unmatched", 1, "e,f"}, // what no partition selects comes last
	}
	if got := shapes(parts, targets); !reflect.DeepEqual(got, want) {
		t.Errorf("partitions\n got %v\nwant %v", got, want)
	}
}

func TestPartitions_InvalidStrategyNamesTheField(t *testing.T) {
	targets := targetsNamed(3)
	for _, tc := range []struct {
		s    *fleet.RolloutStrategy
		want string
	}{
		{&fleet.RolloutStrategy{Partitions: []fleet.Partition{{ClusterName: "x"}, {ClusterSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Like"}}}}}},
			"spec.rolloutStrategy.partitions[1].clusterSelector"},
		{&fleet.RolloutStrategy{Partitions: []fleet.Partition{{ClusterName: "c-000", MaxUnavailable: ios("half")}}},
			`spec.rolloutStrategy.partitions[0].maxUnavailable: "half" is neither a number nor a percentage`},
		{&fleet.RolloutStrategy{AutoPartitionThreshold: ptr.To(1), AutoPartitionSize: ios("quarter")},
			`spec.rolloutStrategy.autoPartitionSize: "quarter"`},
		{&fleet.RolloutStrategy{MaxUnavailable: ios("many")}, `spec.rolloutStrategy.maxUnavailable: "many"`},
	} {
		_, err := Partitions(tc.s, targets, targeting.Groups{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Partitions(%+v) = %v, want an error with %q", tc.s, err, tc.want)
		}
	}
	parts, err := Partitions(nil, targets, targeting.Groups{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Decide(&fleet.RolloutStrategy{MaxUnavailablePartitions: ios("some")}, targets, parts)
	if err == nil || !strings.Contains(err.Error(), `spec.rolloutStrategy.maxUnavailablePartitions: "some"`) {
		t.Errorf("Decide with an invalid maxUnavailablePartitions: %v", err)
	}
}

// bd is a BundleDeployment in force at current, staged at staged, and what
// its agent reports: applied deployment and readiness.
func bd(current, staged, applied string, ready bool) *fleet.BundleDeployment {
	return &fleet.BundleDeployment{
		Spec:   fleet.BundleDeploymentSpec{DeploymentID: current, StagedDeploymentID: staged},
		Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: applied, Ready: ready, NonModified: true},
	}
}

// ready is a BundleDeployment at id, applied and Ready.
func ready(id string) *fleet.BundleDeployment { return bd(id, id, id, true) }

func TestDecide_StepsOfOnePass(t *testing.T) {
	// canary: a, b (at most 1 unavailable); rest: c, d.
	canary := &fleet.RolloutStrategy{Partitions: []fleet.Partition{{Name: "canary", MaxUnavailable: ioi(1), ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"canary": "yes"}}}}}
	four := func(bds ...*fleet.BundleDeployment) []Target {
		names := []string{"a", "b", "c", "d"}
		out := make([]Target, len(bds))
		for i := range bds {
			c := cluster(names[i])
			if i < 2 {
				c = cluster(names[i], "canary=yes")
			}
			out[i] = Target{Cluster: c, DeploymentID: "v2", Deployment: bds[i]}
		}
		return out
	}
	type want struct {
		steps       []Step
		stoppedAt   int
		unavailable int // the Bundle's, after the pass
		parts       []int
		held        int
	}
	for _, tc := range []struct {
		name    string
		s       *fleet.RolloutStrategy
		targets []Target
		want    want
	}{
		{name: "defaults: a change reaches every cluster in one pass", s: nil,
			targets: four(ready("v1"), ready("v1"), ready("v1"), ready("v1")),
			want:    want{steps: []Step{Deploy, Deploy, Deploy, Deploy}, stoppedAt: -1, unavailable: 4, parts: []int{4}}},
		{name: "the canary gets one cluster at a time and the rest waits", s: canary,
			targets: four(ready("v1"), ready("v1"), ready("v1"), ready("v1")),
			want:    want{steps: []Step{Deploy, Stage, Keep, Keep}, stoppedAt: 0, unavailable: 1, parts: []int{2, 0}, held: 3}},
		{name: "still applying: nothing more moves", s: canary,
			targets: four(bd("v2", "v2", "v1", true), bd("v1", "v2", "v1", true), ready("v1"), ready("v1")),
			want:    want{steps: []Step{Keep, Keep, Keep, Keep}, stoppedAt: 0, unavailable: 1, parts: []int{2, 0}, held: 3}},
		{name: "the first canary Ready: the second moves and, within the canary's limit, the rest too", s: canary,
			targets: four(ready("v2"), bd("v1", "v2", "v1", true), ready("v1"), ready("v1")),
			want:    want{steps: []Step{Keep, Deploy, Deploy, Deploy}, stoppedAt: -1, unavailable: 3, parts: []int{1, 2}}},
		{name: "a canary failing with the change: the rollout stops there", s: canary,
			targets: four(bd("v2", "v2", "v2", false), bd("v1", "v2", "v1", true), ready("v1"), ready("v1")),
			want:    want{steps: []Step{Keep, Keep, Keep, Keep}, stoppedAt: 0, unavailable: 1, parts: []int{2, 0}, held: 3}},
		{name: "a fix for the failing canary reaches it at once, the others wait", s: canary,
			targets: func() []Target {
				ts := four(bd("v2", "v2", "v2", false), bd("v1", "v2", "v1", true), ready("v1"), ready("v1"))
				for i := range ts {
					ts[i].DeploymentID = "v3"
				}
				return ts
			}(),
			want: want{steps: []Step{Deploy, Stage, Keep, Keep}, stoppedAt: 0, unavailable: 1, parts: []int{2, 0}, held: 3}},
		{name: "paused clusters only stage", s: nil,
			targets: func() []Target {
				ts := four(ready("v1"), ready("v1"), ready("v1"), ready("v1"))
				ts[1].Paused = true
				return ts
			}(),
			want: want{steps: []Step{Deploy, Stage, Deploy, Deploy}, stoppedAt: -1, unavailable: 3, parts: []int{4}}},
		{name: "the Bundle's maxUnavailable holds the rest staged", s: &fleet.RolloutStrategy{MaxUnavailable: ioi(2)},
			targets: four(ready("v1"), ready("v1"), ready("v1"), ready("v1")),
			want:    want{steps: []Step{Deploy, Deploy, Stage, Stage}, stoppedAt: 0, unavailable: 2, parts: []int{4}, held: 2}},
		{name: "clusters already unavailable count against maxUnavailable", s: &fleet.RolloutStrategy{MaxUnavailable: ioi(2)},
			targets: four(bd("v1", "v1", "v1", false), ready("v1"), ready("v1"), ready("v1")),
			want:    want{steps: []Step{Deploy, Deploy, Stage, Stage}, stoppedAt: 0, unavailable: 2, parts: []int{4}, held: 2}},
		{name: "maxUnavailable 0 moves only clusters that are unavailable anyway (Fleet)", s: &fleet.RolloutStrategy{MaxUnavailable: ioi(0)},
			targets: four(bd("v1", "v1", "v1", false), ready("v1"), ready("v1"), ready("v1")),
			want:    want{steps: []Step{Deploy, Stage, Stage, Stage}, stoppedAt: 0, unavailable: 1, parts: []int{4}, held: 3}},
		{name: "a change reverted before it got to a cluster: its staged field follows, even behind the stop", s: canary,
			targets: func() []Target {
				ts := four(bd("v2", "v2", "v2", false), bd("v2", "v2", "v2", false), bd("v1", "v2", "v1", true), ready("v1"))
				for i := range ts {
					ts[i].DeploymentID = "v1"
				}
				return ts
			}(),
			want: want{steps: []Step{Deploy, Deploy, Stage, Keep}, stoppedAt: 0, unavailable: 2, parts: []int{2, 0}, held: 0}},
		{name: "a new Bundle: every cluster gets its BundleDeployment", s: canary,
			targets: four(nil, nil, nil, nil),
			// A partition the pass does not reach shows its unavailable
			// clusters as first seen (Fleet): none have a BundleDeployment.
			want: want{steps: []Step{Deploy, Deploy, Skip, Skip}, stoppedAt: 0, unavailable: 0, parts: []int{2, 0}, held: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts, err := Partitions(tc.s, tc.targets, targeting.Groups{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := Decide(tc.s, tc.targets, parts)
			if err != nil {
				t.Fatal(err)
			}
			got := want{steps: p.Steps, stoppedAt: p.StoppedAt, unavailable: p.Unavailable, parts: p.PartitionUnavailable, held: p.Held(tc.targets)}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDecide_MaxNewBoundsCreationsPerPass(t *testing.T) {
	for _, tc := range []struct {
		maxNew *int
		n      int
		want   int
	}{{nil, 120, 50}, {ptr.To(10), 100, 10}, {ptr.To(200), 20, 20}, {ptr.To(0), 10, 0}} {
		targets := targetsNamed(tc.n)
		s := &fleet.RolloutStrategy{MaxNew: tc.maxNew}
		parts, err := Partitions(s, targets, targeting.Groups{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := Decide(s, targets, parts)
		if err != nil {
			t.Fatal(err)
		}
		created := 0
		for i, st := range p.Steps {
			if st == Deploy {
				if i != created {
					t.Errorf("maxNew %v: target %d created out of order", tc.maxNew, i)
				}
				created++
			}
		}
		if created != tc.want || p.NewlyCreated != tc.want {
			t.Errorf("maxNew %v on %d clusters: %d created (newlyCreated %d), want %d", tc.maxNew, tc.n, created, p.NewlyCreated, tc.want)
		}
	}
}

func TestDecide_MaxUnavailablePartitionsLetsTheRolloutGoOn(t *testing.T) {
	// Three partitions of two clusters, each allowing none unavailable
	// beyond one moving at a time.
	targets := targetsNamed(6)
	for i := range targets {
		targets[i].Deployment = ready("v1")
	}
	s := &fleet.RolloutStrategy{AutoPartitionThreshold: ptr.To(1), AutoPartitionSize: ioi(2), MaxUnavailable: ioi(1), MaxUnavailablePartitions: ioi(1)}
	parts, err := Partitions(s, targets, targeting.Groups{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Decide(s, targets, parts)
	if err != nil {
		t.Fatal(err)
	}
	// The Bundle's maxUnavailable (1) holds the second partition's
	// clusters staged; the third is not reached.
	want := []Step{Deploy, Stage, Stage, Stage, Keep, Keep}
	if !reflect.DeepEqual(p.Steps, want) || p.StoppedAt != 1 || p.UnavailablePartitions != 2 || p.MaxUnavailablePartitions != 1 {
		t.Errorf("steps %v stopped at %d, %d/%d unavailable partitions; want %v stopped at 1, 2/1", p.Steps, p.StoppedAt, p.UnavailablePartitions, p.MaxUnavailablePartitions, want)
	}
}

func TestStatusesAndMessage_NameThePartitionAndItsUnavailableClusters(t *testing.T) {
	targets := []Target{
		{Cluster: cluster("a", "canary=yes"), DeploymentID: "v2", Deployment: bd("v2", "v2", "v2", false)},
		{Cluster: cluster("b", "canary=yes"), DeploymentID: "v2", Deployment: bd("v1", "v2", "v1", true)},
		{Cluster: cluster("c"), DeploymentID: "v2", Deployment: ready("v1")},
		{Cluster: cluster("d"), DeploymentID: "v2"},
	}
	targets[0].Deployment.Namespace, targets[0].Deployment.Name = "cluster-a", "app"
	s := &fleet.RolloutStrategy{Partitions: []fleet.Partition{{Name: "canary", MaxUnavailable: ioi(1), ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"canary": "yes"}}}}}
	parts, err := Partitions(s, targets, targeting.Groups{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Decide(s, targets, parts)
	if err != nil {
		t.Fatal(err)
	}
	bds := []*fleet.BundleDeployment{targets[0].Deployment, targets[1].Deployment, targets[2].Deployment, nil}
	st := Statuses(parts, p, bds)
	if len(st) != 2 || st[0].Name != "canary" || st[0].Count != 2 || st[0].MaxUnavailable != 1 || st[0].Unavailable != 2 ||
		st[0].Summary.NotReady != 1 || st[0].Summary.OutOfSync != 1 || st[0].Summary.DesiredReady != 2 {
		t.Errorf("canary status %+v", st[0])
	}
	if st[1].Name != "Unmatched" || st[1].Count != 2 || st[1].Summary.Ready != 1 || st[1].Summary.Pending != 1 {
		t.Errorf("unmatched status %+v", st[1])
	}
	msg := p.Message(st, p.Held(targets))
	for _, want := range []string{`rollout stopped at partition "canary"`, `partition "canary": 2 of 2 cluster(s) unavailable, at most 1 allowed`, "NotReady(1) [cluster-a/app]", "3 cluster(s) wait"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}
