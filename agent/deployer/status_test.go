package deployer

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

func TestComputeStatus(t *testing.T) {
	const id = "s-aaaaaaaaaaaaaaaaaaaa:bbbbbbbbbbbb"
	applied := fleet.BundleDeploymentStatus{AppliedDeploymentID: id, SyncGeneration: ptr.To[int64](0)}
	res := []fleet.BundleDeploymentResource{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}}
	many := func(n int) []fleet.NonReadyStatus {
		out := make([]fleet.NonReadyStatus, n)
		for i := range out {
			out[i] = fleet.NonReadyStatus{Kind: "Deployment", Namespace: "ns", Name: "d", Summary: fleet.SummaryOf("InProgress", "")}
		}
		return out
	}
	cases := []struct {
		name       string
		old        fleet.BundleDeploymentStatus
		obs        observation
		state      fleet.BundleState
		ready      metav1.ConditionStatus
		readyWhy   string
		deployed   metav1.ConditionStatus
		deployWhy  string
		monitored  metav1.ConditionStatus
		check      func(t *testing.T, st fleet.BundleDeploymentStatus)
		appliedOut string
	}{
		{
			name:  "applied and healthy",
			obs:   observation{DeploymentID: id, Applied: true, Resources: res, Monitored: true},
			state: fleet.Ready, ready: metav1.ConditionTrue, readyWhy: fleet.SucceededReason,
			deployed: metav1.ConditionTrue, deployWhy: fleet.SucceededReason, monitored: metav1.ConditionTrue,
			appliedOut: id,
			check: func(t *testing.T, st fleet.BundleDeploymentStatus) {
				if !st.Ready || !st.NonModified || st.SyncGeneration == nil || len(st.Resources) != 1 || st.Display.Deployed != "Yes" || st.Display.Monitored != "Yes" {
					t.Errorf("status = %+v", st)
				}
			},
		},
		{
			name:  "waiting for content keeps what was applied",
			old:   applied,
			obs:   observation{DeploymentID: "s-new:opts", Waiting: "waiting for content"},
			state: fleet.WaitApplied, ready: metav1.ConditionFalse, readyWhy: WaitingForContentReason,
			deployed: metav1.ConditionFalse, deployWhy: WaitingForContentReason, monitored: metav1.ConditionUnknown,
			appliedOut: id,
		},
		{
			name:  "apply failed",
			obs:   observation{DeploymentID: id, Failed: &failure{Reason: fleet.ApplyFailedReason, Message: "Widget x: unknown kind"}},
			state: fleet.ErrApplied, ready: metav1.ConditionFalse, readyWhy: fleet.ApplyFailedReason,
			deployed: metav1.ConditionFalse, deployWhy: fleet.ApplyFailedReason, monitored: metav1.ConditionUnknown,
			check: func(t *testing.T, st fleet.BundleDeploymentStatus) {
				if !strings.HasPrefix(st.Display.Deployed, "Error") {
					t.Errorf("display.deployed = %q", st.Display.Deployed)
				}
			},
		},
		{
			name: "modified beats not ready",
			old:  applied,
			obs: observation{DeploymentID: id, Resources: res, Monitored: true, NonReady: many(1),
				Modified: []fleet.ModifiedStatus{{Kind: "ConfigMap", Namespace: "ns", Name: "a", Create: true}}},
			state: fleet.Modified, ready: metav1.ConditionFalse, readyWhy: fleet.ModifiedReason,
			deployed: metav1.ConditionTrue, deployWhy: fleet.SucceededReason, monitored: metav1.ConditionTrue,
			appliedOut: id,
			check: func(t *testing.T, st fleet.BundleDeploymentStatus) {
				if st.NonModified || st.Ready {
					t.Errorf("nonModified=%v ready=%v", st.NonModified, st.Ready)
				}
				if c := meta.FindStatusCondition(st.Conditions, fleet.ReadyCondition); !strings.Contains(c.Message, "ConfigMap ns/a (missing)") {
					t.Errorf("Ready message %q", c.Message)
				}
			},
		},
		{
			name:  "not ready lists at most ten",
			old:   applied,
			obs:   observation{DeploymentID: id, Resources: res, Monitored: true, NonReady: many(12)},
			state: fleet.NotReady, ready: metav1.ConditionFalse, readyWhy: fleet.NotReadyReason,
			deployed: metav1.ConditionTrue, deployWhy: fleet.SucceededReason, monitored: metav1.ConditionTrue,
			appliedOut: id,
			check: func(t *testing.T, st fleet.BundleDeploymentStatus) {
				if len(st.NonReadyStatus) != maxListed {
					t.Errorf("nonReadyStatus has %d entries", len(st.NonReadyStatus))
				}
			},
		},
		{
			name:  "health timeout",
			old:   applied,
			obs:   observation{DeploymentID: id, Resources: res, Monitored: true, NonReady: many(1), HealthTimedOut: true},
			state: fleet.NotReady, ready: metav1.ConditionFalse, readyWhy: HealthTimeoutReason,
			deployed: metav1.ConditionTrue, deployWhy: fleet.SucceededReason, monitored: metav1.ConditionTrue,
			appliedOut: id,
		},
		{
			name:  "paused behind",
			old:   applied,
			obs:   observation{DeploymentID: "s-new:opts", Paused: true, Resources: res, Monitored: true},
			state: fleet.WaitApplied, ready: metav1.ConditionFalse, readyWhy: fleet.PausedReason,
			deployed: metav1.ConditionFalse, deployWhy: fleet.PausedReason, monitored: metav1.ConditionTrue,
			appliedOut: id,
		},
		{
			name:  "forceSyncGeneration not applied yet",
			old:   applied,
			obs:   observation{DeploymentID: id, ForceSyncGeneration: 2, Paused: true},
			state: fleet.WaitApplied, ready: metav1.ConditionFalse, readyWhy: fleet.PausedReason,
			deployed: metav1.ConditionFalse, deployWhy: fleet.PausedReason, monitored: metav1.ConditionUnknown,
			appliedOut: id,
		},
		{
			name:  "drift corrected",
			old:   applied,
			obs:   observation{DeploymentID: id, Applied: true, Resources: res, Monitored: true, Corrected: []string{"ConfigMap ns/a"}},
			state: fleet.Ready, ready: metav1.ConditionTrue, readyWhy: fleet.SucceededReason,
			deployed: metav1.ConditionTrue, deployWhy: fleet.SucceededReason, monitored: metav1.ConditionTrue,
			appliedOut: id,
			check: func(t *testing.T, st fleet.BundleDeploymentStatus) {
				if c := meta.FindStatusCondition(st.Conditions, fleet.MonitoredCondition); c.Reason != DriftCorrectedReason || !strings.Contains(c.Message, "ConfigMap ns/a") {
					t.Errorf("Monitored = %+v", c)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.obs.Generation = 7
			st := computeStatus(tc.old, tc.obs)
			if st.Display.State != string(tc.state) {
				t.Errorf("state = %s, want %s", st.Display.State, tc.state)
			}
			for _, want := range []struct {
				typ    string
				status metav1.ConditionStatus
				reason string
			}{
				{fleet.ReadyCondition, tc.ready, tc.readyWhy},
				{fleet.DeployedCondition, tc.deployed, tc.deployWhy},
				{fleet.MonitoredCondition, tc.monitored, ""},
			} {
				c := meta.FindStatusCondition(st.Conditions, want.typ)
				if c == nil {
					t.Fatalf("no %s condition", want.typ)
				}
				if c.Status != want.status || (want.reason != "" && c.Reason != want.reason) || c.ObservedGeneration != 7 {
					t.Errorf("%s = %s/%s (generation %d), want %s/%s (generation 7): %s", want.typ, c.Status, c.Reason, c.ObservedGeneration, want.status, want.reason, c.Message)
				}
			}
			if st.AppliedDeploymentID != tc.appliedOut {
				t.Errorf("appliedDeploymentID = %q, want %q", st.AppliedDeploymentID, tc.appliedOut)
			}
			if tc.check != nil {
				tc.check(t, st)
			}
			// Re-entrant: the same observation on the new status changes
			// nothing, so nothing is written.
			again := computeStatus(st, tc.obs)
			if !equalStatus(st, again) {
				t.Errorf("second pass changed the status:\n%+v\n%+v", st, again)
			}
		})
	}
}

// When the deployment in force was applied comes from the status, never
// from the agent's memory; a status without it records where the count
// started, so the next agent starts from the same moment.
func TestAppliedSince(t *testing.T) {
	earlier := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	deployedAt := metav1.NewTime(time.Now().Add(-2 * time.Hour).Truncate(time.Second))
	deployed := []metav1.Condition{{Type: fleet.DeployedCondition, Status: metav1.ConditionTrue, LastTransitionTime: deployedAt}}

	// This pass applied: its time.
	now := metav1.Now()
	bd := &fleet.BundleDeployment{Status: fleet.BundleDeploymentStatus{AppliedAt: &earlier, Conditions: deployed}}
	if got := appliedSince(bd, &observation{AppliedAt: &now}); !got.Equal(now.Time) {
		t.Errorf("applied by this pass: %s, want %s", got, now)
	}
	// Recorded in the status (by this agent or one before it): that time,
	// not the Deployed condition's, which does not move when a deployment
	// replaces another.
	o := observation{}
	if got := appliedSince(bd, &o); !got.Equal(earlier.Time) || o.AppliedAt != nil {
		t.Errorf("recorded: %s (recording %v), want %s and nothing to record", got, o.AppliedAt, earlier)
	}
	// Not recorded (an earlier agent's status): the Deployed condition's
	// transition, and recorded from now on.
	bd.Status.AppliedAt = nil
	if got := appliedSince(bd, &o); !got.Equal(deployedAt.Time) || o.AppliedAt == nil || !o.AppliedAt.Equal(&deployedAt) {
		t.Errorf("not recorded, Deployed: %s (recording %v), want %s", got, o.AppliedAt, deployedAt)
	}
	st := computeStatus(bd.Status, o)
	if st.AppliedAt == nil || !st.AppliedAt.Equal(&deployedAt) {
		t.Errorf("status appliedAt = %v, want %s", st.AppliedAt, deployedAt)
	}
	// Not recorded, not Deployed: from now.
	bd.Status.Conditions = nil
	o = observation{}
	if got := appliedSince(bd, &o); time.Since(got) > time.Minute || o.AppliedAt == nil {
		t.Errorf("not recorded, not Deployed: %s (recording %v), want now", got, o.AppliedAt)
	}
	// A pass that knows nothing new keeps what the status says.
	if st := computeStatus(fleet.BundleDeploymentStatus{AppliedAt: &earlier}, observation{Applied: true}); st.AppliedAt == nil || !st.AppliedAt.Equal(&earlier) {
		t.Errorf("kept appliedAt = %v, want %s", st.AppliedAt, earlier)
	}
}

// equalStatus is the comparison Reconcile makes before writing.
func equalStatus(a, b fleet.BundleDeploymentStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}

func TestPrepareObjects(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}, meta.RESTScopeRoot)

	obj := func(apiVersion, kind, ns, name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	crd := func(scope string) *unstructured.Unstructured {
		u := obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "gadgets.example.com")
		u.Object["spec"] = map[string]any{"group": "example.com", "scope": scope, "names": map[string]any{"kind": "Gadget"}}
		return u
	}
	owner := func(objs []*unstructured.Unstructured) {
		for _, o := range objs {
			l := o.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			l["owned"] = "yes"
			o.SetLabels(l)
		}
	}
	nsOf := func(p *prepared) []string {
		var out []string
		for _, o := range p.objects {
			out = append(out, o.GetKind()+":"+o.GetNamespace())
		}
		return out
	}

	t.Run("defaultNamespace only where none is set, cluster-scoped stays cluster-scoped", func(t *testing.T) {
		p, err := prepareObjects([]*unstructured.Unstructured{
			obj("v1", "ConfigMap", "", "a"), obj("v1", "ConfigMap", "own", "b"), obj("rbac.authorization.k8s.io/v1", "ClusterRole", "stray", "r"),
		}, fleet.BundleDeploymentOptions{DefaultNamespace: "apps", NamespaceLabels: map[string]string{"team": "x"}}, mapper, owner)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(nsOf(p), ","); got != "ConfigMap:apps,ConfigMap:own,ClusterRole:" {
			t.Errorf("namespaces = %s", got)
		}
		if p.namespace == nil || p.namespace.GetName() != "apps" || p.namespace.GetLabels()["team"] != "x" || p.namespace.GetAnnotations()[PruneAnnotation] != PruneDisabled {
			t.Errorf("made namespace = %+v", p.namespace)
		}
		if p.namespace.GetLabels()["owned"] != "" {
			t.Error("the made namespace carries owner labels: two bundles sharing it would fight over them")
		}
		for _, o := range p.objects {
			if o.GetLabels()["owned"] != "yes" {
				t.Errorf("%s has no owner labels", o.GetName())
			}
		}
	})
	t.Run("namespace forces, no namespace object for default", func(t *testing.T) {
		p, err := prepareObjects([]*unstructured.Unstructured{obj("v1", "ConfigMap", "own", "b")},
			fleet.BundleDeploymentOptions{TargetNamespace: "default", DefaultNamespace: "ignored"}, mapper, owner)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(nsOf(p), ","); got != "ConfigMap:default" || p.namespace != nil {
			t.Errorf("namespaces = %s, made %v", got, p.namespace)
		}
	})
	t.Run("namespace labels go on the bundle's own namespace object", func(t *testing.T) {
		p, err := prepareObjects([]*unstructured.Unstructured{obj("v1", "Namespace", "", "apps"), obj("v1", "ConfigMap", "", "a")},
			fleet.BundleDeploymentOptions{DefaultNamespace: "apps", NamespaceLabels: map[string]string{"team": "x"}}, mapper, owner)
		if err != nil {
			t.Fatal(err)
		}
		if p.namespace != nil || p.objects[0].GetLabels()["team"] != "x" || p.objects[0].GetLabels()["owned"] != "yes" {
			t.Errorf("made %v, bundle namespace labels %v", p.namespace, p.objects[0].GetLabels())
		}
	})
	t.Run("custom resource scoped by the CRD in the bundle", func(t *testing.T) {
		for scope, want := range map[string]string{"Namespaced": "apps", "Cluster": ""} {
			p, err := prepareObjects([]*unstructured.Unstructured{crd(scope), obj("example.com/v1", "Gadget", "", "g")},
				fleet.BundleDeploymentOptions{DefaultNamespace: "apps"}, mapper, owner)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.objects[1].GetNamespace(); got != want {
				t.Errorf("%s gadget namespace = %q, want %q", scope, got, want)
			}
		}
	})
	t.Run("unknown kind names the object and is retried", func(t *testing.T) {
		// Its CRD may yet be installed downstream: not Stalled.
		_, err := prepareObjects([]*unstructured.Unstructured{obj("example.com/v1", "Widget", "x", "w")}, fleet.BundleDeploymentOptions{}, mapper, owner)
		if err == nil || !strings.Contains(err.Error(), "Widget x/w") || reconciler.Failure(err).Kind() != reconciler.KindTransient {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("duplicates and nameless objects stall", func(t *testing.T) {
		for _, objs := range [][]*unstructured.Unstructured{
			{obj("v1", "ConfigMap", "", "a"), obj("v1", "ConfigMap", "default", "a")},
			{obj("v1", "ConfigMap", "", "")},
		} {
			_, err := prepareObjects(objs, fleet.BundleDeploymentOptions{}, mapper, owner)
			if s := reconciler.Failure(err).Stalled(); s == nil || s.Reason != fleet.ApplyFailedReason {
				t.Errorf("err = %v, want Stalled (%s): the bundle's author must act", err, fleet.ApplyFailedReason)
			}
		}
	})
}

func TestDriftSummary(t *testing.T) {
	live := map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "s", "resourceVersion": "2", "labels": map[string]any{"a": "1", "x": "extra"}},
		"data":     map[string]any{"password": "c2VjcmV0", "same": "eA=="},
		"status":   map[string]any{"phase": "x"},
	}
	desired := map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "s", "resourceVersion": "3", "labels": map[string]any{"a": "1"}},
		"data":     map[string]any{"password": "b3JpZ2luYWw=", "same": "eA=="},
		"status":   map[string]any{"phase": "y"},
	}
	got := driftSummary(live, desired)
	if got != "changed data.password, metadata.labels.x" {
		t.Errorf("summary = %q", got)
	}
	if strings.Contains(got, "c2VjcmV0") || strings.Contains(got, "b3JpZ2luYWw") {
		t.Error("summary holds values")
	}
	wide := map[string]any{"data": map[string]any{}}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		wide["data"].(map[string]any)[k] = k
	}
	if got := driftSummary(wide, map[string]any{"data": map[string]any{}}); !strings.HasSuffix(got, "and 2 more") {
		t.Errorf("summary = %q", got)
	}
}

func TestInventoryName(t *testing.T) {
	if got := InventoryName("app"); got != "fleet-inventory-app" {
		t.Errorf("InventoryName(app) = %q", got)
	}
	long := strings.Repeat("a", 250)
	a, b := InventoryName(long), InventoryName(long+"b")
	if len(a) > 253 || len(b) > 253 || a == b || !strings.HasPrefix(a, InventoryPrefix) {
		t.Errorf("long names: %q (%d) %q (%d)", a, len(a), b, len(b))
	}
}

func TestInventoryDiff(t *testing.T) {
	ref := func(apiVersion, kind, name string) objRef {
		return objRef{APIVersion: apiVersion, Kind: kind, Namespace: "ns", Name: name}
	}
	prev := &inventory{Resources: []objRef{ref("v1", "ConfigMap", "a"), ref("v1", "ConfigMap", "b"), ref("example.com/v1", "Gadget", "g")}}
	// A version change of a kind is the same object: not pruned.
	next := []objRef{ref("v1", "ConfigMap", "a"), ref("example.com/v2", "Gadget", "g")}
	if stale := prev.without(next); len(stale) != 1 || stale[0].Name != "b" {
		t.Errorf("stale = %v", stale)
	}
	if !prev.contains(next) || prev.contains([]objRef{ref("v1", "ConfigMap", "c")}) {
		t.Error("contains is wrong")
	}
	var none *inventory
	if none.contains(next) || !none.contains(nil) || none.without(next) != nil {
		t.Error("nil inventory is wrong")
	}
	if u := union(next, prev); len(u) != 3 {
		t.Errorf("union = %v", u)
	}
}
