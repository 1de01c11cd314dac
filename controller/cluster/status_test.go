package cluster

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

func TestComputeConditions(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	seen := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }
	type want struct {
		ready, reconciling, stalled, imported string // "True", "False" or "" (absent)
		reason, state                         string
	}
	cases := []struct {
		name     string
		manager  bool
		lastSeen metav1.Time
		o        outcome
		want     want
	}{
		{"agent-initiated, never seen", false, metav1.Time{}, outcome{},
			want{ready: "False", reconciling: "True", reason: fleet.WaitingForRegistrationReason, state: "WaitCheckIn"}},
		{"agent-initiated, fresh heartbeat", false, seen(30 * time.Second), outcome{offlineAfter: 3 * time.Minute},
			want{ready: "True", reason: fleet.AgentHeartbeatReason}},
		{"agent-initiated, offline", false, seen(10 * time.Minute), outcome{offlineAfter: 3 * time.Minute},
			want{ready: "False", reconciling: "True", reason: fleet.OfflineReason, state: "Offline"}},
		{"imported, waiting for agent", true, metav1.Time{}, outcome{imported: okResult("deployed")},
			want{ready: "False", reconciling: "True", imported: "True", reason: fleet.WaitingForRegistrationReason, state: "WaitCheckIn"}},
		{"import stalled on bad input", true, metav1.Time{}, outcome{imported: stalled(fleet.KubeConfigKeyMissingReason, "no key")},
			want{ready: "False", stalled: "True", imported: "False", reason: fleet.KubeConfigKeyMissingReason, state: "WaitCheckIn"}},
		{"import retrying", true, seen(time.Second), outcome{imported: waiting(fleet.DownstreamUnreachableReason, "down"), offlineAfter: time.Minute},
			want{ready: "False", reconciling: "True", imported: "False", reason: fleet.DownstreamUnreachableReason}},
		{"other step failed before import", true, seen(time.Second), outcome{failure: stalled(fleet.RenderFailedReason, "bad env"), offlineAfter: time.Minute},
			want{ready: "False", stalled: "True", reason: fleet.RenderFailedReason}},
		{"imported and checking in", true, seen(time.Second), outcome{imported: okResult("deployed"), offlineAfter: time.Minute},
			want{ready: "True", imported: "True", reason: fleet.AgentHeartbeatReason}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &fleet.Cluster{}
			c.Generation = 4
			if tc.manager {
				c.Spec.KubeConfigSecret = "kc"
				c.Status.AgentDeployedGeneration = ptr.To(int64(0))
			}
			c.Status.Agent.LastSeen = tc.lastSeen
			// A stale condition from an earlier pass must not survive.
			meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: fleet.StalledCondition, Status: metav1.ConditionTrue, Reason: "Old"})
			tc.o.now = now
			computeConditions(c, tc.o)
			check := func(condType, want string) {
				cond := meta.FindStatusCondition(c.Status.Conditions, condType)
				got := ""
				if cond != nil {
					got = string(cond.Status)
					if cond.ObservedGeneration != 4 {
						t.Errorf("%s observedGeneration %d", condType, cond.ObservedGeneration)
					}
				}
				if got != want {
					t.Errorf("%s = %q, want %q (%+v)", condType, got, want, c.Status.Conditions)
				}
			}
			check(fleet.ReadyCondition, tc.want.ready)
			check(fleet.ReconcilingCondition, tc.want.reconciling)
			check(fleet.StalledCondition, tc.want.stalled)
			check(fleet.ImportedCondition, tc.want.imported)
			if r := meta.FindStatusCondition(c.Status.Conditions, fleet.ReadyCondition); r.Reason != tc.want.reason {
				t.Errorf("Ready reason %q, want %q", r.Reason, tc.want.reason)
			}
			if c.Status.Display.State != tc.want.state {
				t.Errorf("display state %q, want %q", c.Status.Display.State, tc.want.state)
			}
		})
	}
}

func TestDeployReason(t *testing.T) {
	base := func() *fleet.Cluster {
		c := &fleet.Cluster{}
		c.Spec.RedeployAgentGeneration = 2
		c.Status.AgentDeployedGeneration = ptr.To(int64(2))
		c.Status.AgentValuesHash = "v"
		c.Status.KubeConfigServerHash = "s"
		return c
	}
	cases := []struct {
		name   string
		mutate func(c *fleet.Cluster)
		values string
		server string
		want   string
	}{
		{"nothing changed", func(*fleet.Cluster) {}, "v", "s", ""},
		{"never deployed", func(c *fleet.Cluster) { c.Status.AgentDeployedGeneration = nil }, "v", "s", deployFirst},
		{"generation bumped", func(c *fleet.Cluster) { c.Spec.RedeployAgentGeneration = 3 }, "v2", "s", deployGeneration},
		{"generation set back (-1)", func(c *fleet.Cluster) { c.Spec.RedeployAgentGeneration = -1 }, "v2", "s", deployGeneration},
		{"settings changed", func(*fleet.Cluster) {}, "v2", "s", deploySettings},
		{"kubeconfig points elsewhere", func(*fleet.Cluster) {}, "v", "s2", deployServer},
	}
	for _, tc := range cases {
		c := base()
		tc.mutate(c)
		if got := deployReason(c, tc.values, tc.server); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestAgentStatusChanged_OnlyHeartbeatsThatMatter(t *testing.T) {
	p := agentStatusChanged()
	ready := func(lastSeen int64, nodes int32, isReady bool) *fleet.Cluster {
		c := &fleet.Cluster{}
		c.Status.Agent.LastSeen = metav1.Unix(lastSeen, 0)
		c.Status.Agent.NodeCount = nodes
		s := metav1.ConditionFalse
		if isReady {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: fleet.ReadyCondition, Status: s, Reason: "x"})
		return c
	}
	cases := []struct {
		name     string
		old, new *fleet.Cluster
		want     bool
	}{
		{"plain heartbeat of a Ready cluster", ready(1, 3, true), ready(2, 3, true), false},
		{"heartbeat of a cluster that is not Ready", ready(1, 3, false), ready(2, 3, false), true},
		{"heartbeat that reports new nodes", ready(1, 3, true), ready(2, 4, true), true},
		{"no heartbeat", ready(1, 3, true), ready(1, 3, true), false},
	}
	for _, tc := range cases {
		if got := p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
