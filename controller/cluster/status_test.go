package cluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

func TestComputeConditions(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	seen := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }
	type want struct {
		ready, reconciling, stalled, imported string // "True", "False" or "" (absent)
		reason, message, state                string
		kind                                  reconciler.Kind
	}
	cases := []struct {
		name     string
		manager  bool
		lastSeen metav1.Time
		o        observation
		want     want
	}{
		{"agent-initiated, never seen", false, metav1.Time{}, observation{},
			want{ready: "False", reconciling: "True", reason: fleet.WaitingForRegistrationReason, state: "WaitCheckIn", kind: reconciler.KindWaiting,
				message: "waiting for an agent to register for this cluster (helm install fleet-agent with a ClusterRegistrationToken's values)"}},
		{"agent-initiated, fresh heartbeat", false, seen(30 * time.Second), observation{offlineAfter: 3 * time.Minute},
			want{ready: "True", reason: fleet.AgentHeartbeatReason, kind: reconciler.KindSucceeded}},
		{"agent-initiated, offline", false, seen(10 * time.Minute), observation{offlineAfter: 3 * time.Minute},
			want{ready: "False", reconciling: "True", reason: fleet.OfflineReason, state: "Offline", kind: reconciler.KindWaiting,
				message: "agent offline: last check-in 10m0s ago (2026-11-30T11:50:00Z), expected every 0s"}},
		{"bundles not ready", false, seen(time.Second), observation{offlineAfter: time.Minute, bundles: fleet.BundleSummary{DesiredReady: 1, NotReady: 1}},
			want{ready: "False", reconciling: "True", reason: fleet.BundleDeploymentsNotReadyReason, state: string(fleet.NotReady), kind: reconciler.KindWaiting}},
		{"imported, waiting for agent", true, metav1.Time{}, observation{imported: true},
			want{ready: "False", reconciling: "True", imported: "True", reason: fleet.WaitingForRegistrationReason, state: "WaitCheckIn", kind: reconciler.KindWaiting,
				message: "agent deployed; waiting for it to register and check in"}},
		{"import stalled on bad input", true, metav1.Time{}, observation{imported: true, err: reconciler.Stall(fleet.KubeConfigKeyMissingReason, "no key")},
			want{ready: "False", stalled: "True", imported: "False", reason: fleet.KubeConfigKeyMissingReason, message: "no key", state: "WaitCheckIn", kind: reconciler.KindStalled}},
		{"import waiting for its token", true, metav1.Time{}, observation{imported: true, err: reconciler.Wait(fleet.WaitingForTokenReason, 0, "waiting for import token")},
			want{ready: "False", reconciling: "True", imported: "False", reason: fleet.WaitingForTokenReason, message: "waiting for import token", state: "WaitCheckIn", kind: reconciler.KindWaiting}},
		{"import retrying", true, seen(time.Second), observation{imported: true, err: reconciler.Retry(fleet.DownstreamUnreachableReason, errors.New("down")), offlineAfter: time.Minute},
			want{ready: "False", reconciling: "True", imported: "False", reason: fleet.DownstreamUnreachableReason, message: "reconciling the cluster failed, retrying: down", kind: reconciler.KindTransient}},
		{"other step failed before import", true, seen(time.Second), observation{err: reconciler.Stall(fleet.RenderFailedReason, "bad env"), offlineAfter: time.Minute},
			want{ready: "False", stalled: "True", reason: fleet.RenderFailedReason, message: "bad env", kind: reconciler.KindStalled}},
		{"cluster namespace being deleted", false, seen(time.Second), observation{err: fmt.Errorf("phase: %w", reconciler.Wait(fleet.WaitingReason, time.Second, "namespace x is being deleted")), offlineAfter: time.Minute},
			want{ready: "False", reconciling: "True", reason: fleet.WaitingReason, message: "namespace x is being deleted", kind: reconciler.KindWaiting}},
		{"transient upstream error", false, seen(time.Second), observation{err: errors.New("boom"), offlineAfter: time.Minute},
			want{ready: "False", reconciling: "True", reason: fleet.ProgressingReason, message: "reconciling the cluster failed, retrying: boom", kind: reconciler.KindTransient}},
		{"imported and checking in", true, seen(time.Second), observation{imported: true, offlineAfter: time.Minute},
			want{ready: "True", imported: "True", reason: fleet.AgentHeartbeatReason, kind: reconciler.KindSucceeded}},
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
			out := computeConditions(c, tc.o)
			if out.Kind() != tc.want.kind {
				t.Errorf("outcome %v, want %v", out.Kind(), tc.want.kind)
			}
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
			r := meta.FindStatusCondition(c.Status.Conditions, fleet.ReadyCondition)
			if r.Reason != tc.want.reason {
				t.Errorf("Ready reason %q, want %q", r.Reason, tc.want.reason)
			}
			if tc.want.message != "" && r.Message != tc.want.message {
				t.Errorf("Ready message %q, want %q", r.Message, tc.want.message)
			}
			// Imported says what Ready says when the import failed, and
			// how far the push got when it succeeded.
			if imp := meta.FindStatusCondition(c.Status.Conditions, fleet.ImportedCondition); imp != nil {
				switch {
				case imp.Status == metav1.ConditionFalse && (imp.Reason != r.Reason || imp.Message != r.Message):
					t.Errorf("Imported %+v, want Ready's reason and message %q", imp, r.Message)
				case imp.Status == metav1.ConditionTrue && (imp.Reason != fleet.SucceededReason || imp.Message != "agent deployed at generation 0"):
					t.Errorf("Imported %+v", imp)
				}
			}
			if c.Status.Display.State != tc.want.state {
				t.Errorf("display state %q, want %q", c.Status.Display.State, tc.want.state)
			}
		})
	}
}

// Imported keeps what it said while the import does not run (an earlier
// phase failed) or raced, and goes when the Cluster stops being
// manager-initiated.
func TestComputeConditions_Imported(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := &fleet.Cluster{Spec: fleet.ClusterSpec{KubeConfigSecret: "kc", RedeployAgentGeneration: 2}}
	computeConditions(c, observation{now: now, imported: true})
	imported := *meta.FindStatusCondition(c.Status.Conditions, fleet.ImportedCondition)
	if imported.Status != metav1.ConditionTrue || imported.Message != "agent deployed at generation 2" || !imported.LastTransitionTime.Time.Equal(now) {
		t.Fatalf("Imported %+v", imported)
	}
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "clusters"}, "c", errors.New("changed"))
	for _, o := range []observation{
		{err: reconciler.Wait(fleet.NamespaceConflictReason, time.Second, "taken")},
		{imported: true, err: fmt.Errorf("updating: %w", conflict)},
	} {
		o.now = now.Add(time.Minute)
		computeConditions(c, o)
		if got := meta.FindStatusCondition(c.Status.Conditions, fleet.ImportedCondition); got == nil || *got != imported {
			t.Errorf("after %v: Imported %+v, want %+v", o.err, got, imported)
		}
	}
	c.Spec.KubeConfigSecret = ""
	computeConditions(c, observation{now: now})
	if meta.FindStatusCondition(c.Status.Conditions, fleet.ImportedCondition) != nil {
		t.Error("Imported left on an agent-initiated Cluster")
	}
}

func TestHeartbeatSchedule(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := &fleet.Cluster{}
	o := observation{now: now, offlineAfter: time.Minute}
	if got := heartbeatSchedule(c, o); got != 0 {
		t.Errorf("never seen: %s", got)
	}
	c.Status.Agent.LastSeen = metav1.NewTime(now.Add(-20 * time.Second))
	if got := heartbeatSchedule(c, o); got != 41*time.Second {
		t.Errorf("online: %s, want the moment it would be offline (41s)", got)
	}
	c.Status.Agent.LastSeen = metav1.NewTime(now.Add(-2 * time.Minute))
	if got := heartbeatSchedule(c, o); got != 0 {
		t.Errorf("offline already: %s", got)
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
		{"identity key reported within the same second", ready(1, 3, true), func() *fleet.Cluster {
			c := ready(1, 3, true)
			c.Status.Agent.IdentityPublicKey = "key"
			return c
		}(), true},
	}
	for _, tc := range cases {
		if got := p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestComputeConditions_DirectEndpoint: the DirectEndpoint condition is
// False, naming the url's host, the certificate's names and the fix, exactly
// when the names the agent reported do not cover the host users dial; it
// leaves Ready alone, and goes once the certificate (or the url) is fixed.
func TestComputeConditions_DirectEndpoint(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		endpoint *fleet.DirectEndpointSpec
		names    []string
		mismatch bool
	}{
		{"no direct endpoint", nil, []string{"other.example.com"}, false},
		{"not reported yet", &fleet.DirectEndpointSpec{URL: "https://dev-1.example.com:6443"}, nil, false},
		{"covered by name", &fleet.DirectEndpointSpec{URL: "https://dev-1.example.com:6443"}, []string{"fleet-agent-direct.x.svc", "dev-1.example.com"}, false},
		{"covered by wildcard", &fleet.DirectEndpointSpec{URL: "https://dev-1.example.com:6443"}, []string{"*.example.com"}, false},
		{"covered by IP", &fleet.DirectEndpointSpec{URL: "https://172.18.0.3:30443"}, []string{"dev-1.example.com", "172.18.0.3"}, false},
		{"node IP not in a certificate made for names", &fleet.DirectEndpointSpec{URL: "https://172.18.0.3:30443"}, []string{"dev-1.example.com", "10.0.0.1"}, true},
		{"wildcard covers one label only", &fleet.DirectEndpointSpec{URL: "https://a.dev-1.example.com"}, []string{"*.example.com"}, true},
		{"mode webhook: users dial the API server", &fleet.DirectEndpointSpec{URL: "https://172.18.0.3:6443", Mode: "webhook"}, []string{"dev-1.example.com"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &fleet.Cluster{Spec: fleet.ClusterSpec{AgentDirectEndpoint: tc.endpoint}}
			c.Generation = 3
			c.Status.Agent.LastSeen = metav1.NewTime(now)
			c.Status.Agent.DirectEndpointCertificateNames = tc.names
			// What an earlier pass said must not survive a fix.
			meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: fleet.DirectEndpointCondition, Status: metav1.ConditionFalse, Reason: fleet.DirectCertificateHostMismatchReason, Message: "old"})
			computeConditions(c, observation{now: now, offlineAfter: time.Minute})
			if !meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ReadyCondition) {
				t.Errorf("Ready is not True: %+v", c.Status.Conditions)
			}
			cond := meta.FindStatusCondition(c.Status.Conditions, fleet.DirectEndpointCondition)
			if !tc.mismatch {
				if cond != nil {
					t.Fatalf("DirectEndpoint %+v, want none", cond)
				}
				return
			}
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != fleet.DirectCertificateHostMismatchReason || cond.ObservedGeneration != 3 {
				t.Fatalf("DirectEndpoint %+v, want False/%s", cond, fleet.DirectCertificateHostMismatchReason)
			}
			host := strings.TrimSuffix(strings.TrimPrefix(strings.Split(strings.TrimPrefix(tc.endpoint.URL, "https://"), ":")[0], "["), "]")
			for _, s := range append([]string{fmt.Sprintf("%q", host), "subject alternative names", "fleet-agent-direct-tls"}, tc.names...) {
				if !strings.Contains(cond.Message, s) {
					t.Errorf("message %q does not say %s", cond.Message, s)
				}
			}
		})
	}
}

// TestFirstCheckInGrace: only a new agent-initiated Cluster with no status
// at all waits for its agent's first check-in, and at most
// FirstCheckInGrace from its creation; the envtest suites' Clusters check in
// at once (controller's createCluster), so this is where the wait is proven.
func TestFirstCheckInGrace(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	newCluster := func(age time.Duration, mutate func(*fleet.Cluster)) *fleet.Cluster {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-age))}}
		if mutate != nil {
			mutate(c)
		}
		return c
	}
	for _, tc := range []struct {
		name string
		c    *fleet.Cluster
		want time.Duration
	}{
		{"new, agent-initiated, no status: waits the rest of the grace", newCluster(5*time.Second, nil), FirstCheckInGrace - 5*time.Second},
		{"older than the grace: written now", newCluster(FirstCheckInGrace+time.Second, nil), 0},
		{"manager-initiated (kubeconfig Secret): no agent to wait for", newCluster(0, func(c *fleet.Cluster) { c.Spec.KubeConfigSecret = "kc" }), 0},
		{"the agent checked in", newCluster(0, func(c *fleet.Cluster) { c.Status.Agent.LastSeen = metav1.NewTime(now) }), 0},
		{"a status already written", newCluster(0, func(c *fleet.Cluster) { c.Status.Namespace = "cluster-ns" }), 0},
		{"conditions already written", newCluster(0, func(c *fleet.Cluster) {
			c.Status.Conditions = []metav1.Condition{{Type: fleet.ReadyCondition, Status: metav1.ConditionFalse}}
		}), 0},
		{"only fleet-proxy's Connected (the tunnel opened before the check-in): waits", newCluster(5*time.Second, func(c *fleet.Cluster) {
			c.Status.Conditions = []metav1.Condition{{Type: fleet.ConnectedCondition, Status: metav1.ConditionTrue}}
		}), FirstCheckInGrace - 5*time.Second},
	} {
		if got := firstCheckInGrace(tc.c, now); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
