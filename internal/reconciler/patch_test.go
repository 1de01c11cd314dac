package reconciler_test

import (
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

func newGroup(t *testing.T) *fleet.ClusterGroup {
	t.Helper()
	g := &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Namespace: newNamespace(t), Name: "g"}}
	if err := env.Upstream.Client.Create(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestStatusPatcher_WritesTheStatusOnceUnderItsFieldManager(t *testing.T) {
	c := env.Upstream.Client
	g := newGroup(t)
	p, err := reconciler.NewStatusPatcher(c, g, ready.Owned()...)
	if err != nil {
		t.Fatal(err)
	}
	rv := g.ResourceVersion
	if err := p.Patch(t.Context(), g); err != nil || g.ResourceVersion != rv {
		t.Fatalf("an unchanged status was written: %v, resourceVersion %s → %s", err, rv, g.ResourceVersion)
	}

	// The pass writes metadata itself; the status patch carries only the
	// status.
	g.Labels = map[string]string{"written": "by-the-pass"}
	if err := c.Update(t.Context(), g, client.FieldOwner(reconciler.FieldManager)); err != nil {
		t.Fatal(err)
	}
	g.Labels = map[string]string{"not": "in-the-status-patch"}
	g.Status.ClusterCount = 3
	ready.Set(g, reconciler.Success(fleet.SucceededReason, "ok"), t0)
	if err := p.Patch(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	got := &fleet.ClusterGroup{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(g), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.ClusterCount != 3 || !meta.IsStatusConditionTrue(got.Status.Conditions, fleet.ReadyCondition) || got.Labels["written"] != "by-the-pass" {
		t.Fatalf("after the patch: %+v %+v", got.Labels, got.Status)
	}
	if !slices.ContainsFunc(got.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
		return m.Manager == reconciler.FieldManager && m.Subresource == "status"
	}) {
		t.Errorf("status not written by %s: %+v", reconciler.FieldManager, got.ManagedFields)
	}

	// A second patch of the same status writes nothing.
	rv = g.ResourceVersion
	if err := p.Patch(t.Context(), g); err != nil || g.ResourceVersion != rv {
		t.Errorf("second patch of the same status: %v, resourceVersion %s → %s", err, rv, g.ResourceVersion)
	}
}

// A writer that is not the controller names its own field manager.
func TestStatusPatcher_WithFieldManager(t *testing.T) {
	c := env.Upstream.Client
	g := newGroup(t)
	p, err := reconciler.NewStatusPatcher(c, g, ready.Owned()...)
	if err != nil {
		t.Fatal(err)
	}
	g.Status.ClusterCount = 2
	if err := p.WithFieldManager("fleet-agent").Patch(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(g.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
		return m.Manager == "fleet-agent" && m.Subresource == "status"
	}) || slices.ContainsFunc(g.ManagedFields, func(m metav1.ManagedFieldsEntry) bool { return m.Manager == reconciler.FieldManager }) {
		t.Errorf("managed fields %+v, want the status written by fleet-agent only", g.ManagedFields)
	}
}

// A condition the controller does not own is written back as it was read,
// whatever the pass did to it.
func TestStatusPatcher_KeepsConditionsItDoesNotOwn(t *testing.T) {
	c := env.Upstream.Client
	g := newGroup(t)
	meta.SetStatusCondition(&g.Status.Conditions, metav1.Condition{Type: "Other", Status: metav1.ConditionTrue, Reason: "Theirs", Message: "kept"})
	if err := c.Status().Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	p, err := reconciler.NewStatusPatcher(c, g, ready.Owned()...)
	if err != nil {
		t.Fatal(err)
	}
	g.Status.Conditions = nil // a careless pass
	ready.Set(g, reconciler.Failure(reconciler.Stall("Bad", "bad")), t0)
	if err := p.Patch(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	got := &fleet.ClusterGroup{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(g), got); err != nil {
		t.Fatal(err)
	}
	other := meta.FindStatusCondition(got.Status.Conditions, "Other")
	if other == nil || other.Reason != "Theirs" || !meta.IsStatusConditionTrue(got.Status.Conditions, fleet.StalledCondition) {
		t.Errorf("conditions %+v", got.Status.Conditions)
	}
}

// A condition another writer adds or changes after the pass read the
// object is not overwritten by the pass's stale copy of the list (a merge
// patch replaces the whole list): the patch conflicts, and the retried
// pass keeps it.
func TestStatusPatcher_DoesNotWriteBackAStaleCondition(t *testing.T) {
	c := env.Upstream.Client
	g := newGroup(t)
	p, err := reconciler.NewStatusPatcher(c, g, ready.Owned()...)
	if err != nil {
		t.Fatal(err)
	}
	// Meanwhile another writer (fleet-proxy's Connected on a Cluster).
	theirs := g.DeepCopy()
	meta.SetStatusCondition(&theirs.Status.Conditions, metav1.Condition{Type: "Connected", Status: metav1.ConditionTrue, Reason: "TunnelUp", Message: "theirs"})
	if err := c.Status().Update(t.Context(), theirs); err != nil {
		t.Fatal(err)
	}
	ready.Set(g, reconciler.Success(fleet.SucceededReason, "ok"), t0)
	if err := p.Patch(t.Context(), g); !apierrors.IsConflict(err) {
		t.Fatalf("a patch of the conditions over a newer list: want a conflict, got %v", err)
	}
	// The retried pass reads the newer object.
	again := &fleet.ClusterGroup{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(g), again); err != nil {
		t.Fatal(err)
	}
	p, err = reconciler.NewStatusPatcher(c, again, ready.Owned()...)
	if err != nil {
		t.Fatal(err)
	}
	ready.Set(again, reconciler.Success(fleet.SucceededReason, "ok"), t0)
	if err := p.Patch(t.Context(), again); err != nil {
		t.Fatal(err)
	}
	got := &fleet.ClusterGroup{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(g), got); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, "Connected"); cond == nil || cond.Message != "theirs" ||
		!meta.IsStatusConditionTrue(got.Status.Conditions, fleet.ReadyCondition) {
		t.Errorf("conditions %+v", got.Status.Conditions)
	}
}

// With the optimistic lock, a status that records a decision made on one
// version of the object is not written over a newer one.
func TestStatusPatcher_OptimisticLockRefusesAChangedObject(t *testing.T) {
	c := env.Upstream.Client
	g := newGroup(t)
	p, err := reconciler.NewStatusPatcher(c, g, ready.Owned()...)
	if err != nil {
		t.Fatal(err)
	}
	newer := g.DeepCopy()
	newer.Annotations = map[string]string{"changed": "meanwhile"}
	if err := c.Update(t.Context(), newer); err != nil {
		t.Fatal(err)
	}
	g.Status.ClusterCount = 1
	if err := p.Patch(t.Context(), g, reconciler.WithOptimisticLock); !apierrors.IsConflict(err) {
		t.Fatalf("want a conflict, got %v", err)
	}
	// Without it the status is merged into the newer object.
	if err := p.Patch(t.Context(), g); err != nil {
		t.Fatal(err)
	}
}

func TestStatusPatcher_GoneObjectIsNotAnError(t *testing.T) {
	c := env.Upstream.Client
	g := newGroup(t)
	p, err := reconciler.NewStatusPatcher(c, g, ready.Owned()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	g.Status.ClusterCount = 1
	if err := p.Patch(t.Context(), g); err != nil {
		t.Errorf("patching a deleted object: %v", err)
	}
}
