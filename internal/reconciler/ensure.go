package reconciler

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/apply"
)

// Owner decides whose an object is: a controller makes objects for an owner
// (a token, a registration) and never takes one made for someone else.
type Owner interface {
	// Check returns nil when existing, found under the name of an object
	// the owner needs, was made for it and may be kept; otherwise an error,
	// usually a *Waiting that names the object and what a person can do.
	Check(existing client.Object) error
	// Own marks obj (the desired object) as made for the owner: labels,
	// owner references.
	Own(obj client.Object) error
}

// Action is what Ensure did.
type Action string

const (
	// Created: the object did not exist and was made.
	Created Action = "created"
	// Updated: the object differed and was changed.
	Updated Action = "updated"
	// Unchanged: the object was as desired; nothing was written.
	Unchanged Action = "unchanged"
)

// Objects makes and keeps the objects a controller owns, by server-side
// apply through internal/apply's ResourceManager (fluxcd/pkg/ssa) under
// apply.FieldManager, the field manager of everything fleet applies.
type Objects struct {
	client client.Client
	live   client.Reader
	rm     *ssa.ResourceManager
}

// NewObjects returns Objects that read through c (the cache) and, when the
// cache does not show an object, through live (the API server).
func NewObjects(c client.Client, live client.Reader) *Objects {
	if live == nil {
		live = c
	}
	return &Objects{client: c, live: live, rm: apply.NewManager(c)}
}

// earlierManagers are the field managers whose fields pass to
// apply.FieldManager at an apply, so that fields fleet stops setting are
// removed: the controller's own, which wrote these objects before they were
// applied, and the create that makes a new object.
var earlierManagers = []ssa.FieldManager{
	{Name: FieldManager, ExactMatch: true, OperationType: metav1.ManagedFieldsOperationUpdate},
	{Name: apply.FieldManager, ExactMatch: true, OperationType: metav1.ManagedFieldsOperationUpdate},
}

// Ensure makes obj exist as given: its name, and the fields its owner wants
// (every other field is left to whoever set it). An object of that name
// that owner.Check refuses is never written. A missing or different object
// is server-side applied; an unchanged one is never written (a server-side
// dry run tells). An owned object whose desired state changes an immutable
// field (a RoleBinding's roleRef, a Secret's type) is deleted and the pass
// waits to make it again. On return obj is the object as it is in the
// cluster.
//
// A new object is made with a plain create, which fails when someone else
// took the name meanwhile; an existing one is applied with the UID of the
// object that was checked as a precondition, so one replaced meanwhile is
// not written either. An object the cache does not show is created at
// once, without reading the API server first: a name that is taken (the
// cache had not caught up) fails the create, and the object is then read
// from the API server and treated as found.
func (o *Objects) Ensure(ctx context.Context, owner Owner, obj client.Object, opts ...EnsureOption) (Action, error) {
	var eo ensureOptions
	for _, opt := range opts {
		opt(&eo)
	}
	kind := KindOf(o.client.Scheme(), obj)
	key := client.ObjectKeyFromObject(obj)
	var (
		existing client.Object
		err      error
	)
	if !eo.expect || eo.expectUID != "" {
		// (With ExpectUID of none the pass found none: the create below
		// is the check.)
		if existing, err = o.cached(ctx, obj); err != nil {
			return "", fmt.Errorf("reading %s %s: %w", kind, key, err)
		}
	}
	if existing == nil && (!eo.expect || eo.expectUID == "") {
		if err := owner.Own(obj); err != nil {
			return "", err
		}
		// A plain create, so a name someone else took meanwhile fails
		// (server-side apply has no "must not exist" precondition). Its
		// fields belong to apply.FieldManager (an update entry), which the
		// first apply that changes the object hands over to the apply
		// (earlierManagers); an object never changed again is never
		// written again: one write, where create-then-apply took three.
		err = o.client.Create(ctx, obj, client.FieldOwner(apply.FieldManager))
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).V(1).Info("created "+kind, "object", key.String())
			return Created, nil
		case !apierrors.IsAlreadyExists(err) || eo.expect:
			return "", fmt.Errorf("creating %s %s: %w", kind, key, err)
		}
		if existing, err = o.readLive(ctx, obj); err != nil {
			return "", fmt.Errorf("reading %s %s: %w", kind, key, err)
		}
		if existing == nil {
			// Deleted again since the create found it.
			return "", Retry(fleet.ProgressingReason, fmt.Errorf("%s %s was deleted while it was being made", kind, key))
		}
	} else if existing == nil {
		// The one object the pass decided on: the cache may not show it yet.
		if existing, err = o.readLive(ctx, obj); err != nil {
			return "", fmt.Errorf("reading %s %s: %w", kind, key, err)
		}
	}
	if err := eo.check(o.client, obj, existing); err != nil {
		return "", fmt.Errorf("%s %s: %w", kind, key, err)
	}
	if existing != nil {
		if err := owner.Check(existing); err != nil {
			return "", err
		}
		if field := immutableChanged(existing, obj); field != "" {
			return "", o.replace(ctx, existing, kind, field)
		}
	}
	if err := owner.Own(obj); err != nil {
		return "", err
	}
	log := ctrl.LoggerFrom(ctx)
	// A server-side dry run first: an unchanged object is not written, and
	// the fields of its create are left to it (handing them to the apply is
	// a write, made with the next change; so a map key fleet stops setting,
	// with nothing else changed, goes with that next change). Fields of
	// the controller's writes before it applied (an upgrade) are taken
	// over at once, so what it no longer sets goes (seen when existing was
	// read from the API server: the cache strips managed fields, and then
	// they go with the next change too).
	if slices.ContainsFunc(existing.GetManagedFields(), func(m metav1.ManagedFieldsEntry) bool { return m.Manager == FieldManager }) {
		// applied below, with the cleanup
	} else if changed, err := o.changed(ctx, obj); err != nil {
		return "", fmt.Errorf("comparing %s %s: %w", kind, key, err)
	} else if !changed {
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(existing).Elem())
		return Unchanged, nil
	}
	action, err := o.apply(ctx, obj, existing.GetUID(), eo.shared)
	if err != nil {
		return "", fmt.Errorf("applying %s %s: %w", kind, key, err)
	}
	if action == ssa.UnchangedAction {
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(existing).Elem())
		return Unchanged, nil
	}
	log.Info("updated "+kind, "object", key.String())
	return Updated, o.live.Get(ctx, key, obj)
}

// createManagers are the field managers whose fields pass to
// apply.FieldManager at an apply of a shared object: the create's only.
var createManagers = earlierManagers[1:]

// changed says whether applying obj would change the object (a dry run).
func (o *Objects) changed(ctx context.Context, obj client.Object) (bool, error) {
	u, err := o.desired(obj)
	if err != nil {
		return false, err
	}
	entry, _, _, err := o.rm.Diff(ctx, u, ssa.DiffOptions{})
	if err != nil {
		return false, err
	}
	return entry.Action != ssa.UnchangedAction, nil
}

// apply server-side applies obj to the object with the given UID (a
// precondition: an object replaced meanwhile makes it fail).
func (o *Objects) apply(ctx context.Context, obj client.Object, uid types.UID, shared bool) (ssa.Action, error) {
	u, err := o.desired(obj)
	if err != nil {
		return "", err
	}
	u.SetUID(uid)
	managers := earlierManagers
	if shared {
		managers = createManagers
	}
	entry, err := o.rm.Apply(ctx, u, ssa.ApplyOptions{Cleanup: ssa.ApplyCleanupOptions{FieldManagers: managers}})
	if err != nil {
		return "", err
	}
	return entry.Action, nil
}

// EnsureOption changes what Ensure accepts.
type EnsureOption func(*ensureOptions)

type ensureOptions struct {
	expect    bool
	expectUID types.UID
	shared    bool
}

// Shared makes Ensure keep only the fields it is given of an object that
// other writes of the controller change too (FieldManager's): a Cluster
// whose clientID and finalizer the Cluster reconciler sets. Without it an
// apply takes FieldManager's fields over and removes those it does not set.
func Shared() EnsureOption {
	return func(o *ensureOptions) { o.shared = true }
}

// ExpectUID makes Ensure write only the object the pass decided on: the
// one with this UID, or, with an empty UID, none (the object must not exist
// yet). Another object, or none, is a conflict (an AlreadyExists or
// Conflict error: the pass is retried and decides again), never written.
// For objects whose content depends on what the pass found, such as a
// credential minted because there was none.
func ExpectUID(uid types.UID) EnsureOption {
	return func(o *ensureOptions) { o.expect, o.expectUID = true, uid }
}

func (eo ensureOptions) check(c client.Client, obj, existing client.Object) error {
	if !eo.expect {
		return nil
	}
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return err
	}
	gr := schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}
	if m, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
		gr = m.Resource.GroupResource()
	}
	switch {
	case eo.expectUID == "" && existing != nil:
		return apierrors.NewAlreadyExists(gr, obj.GetName())
	case eo.expectUID != "" && (existing == nil || existing.GetUID() != eo.expectUID):
		return apierrors.NewConflict(gr, obj.GetName(), errors.New("the object changed since the pass read it"))
	}
	return nil
}

// cached reads the object named like obj from the cache; nil when the
// cache does not show one.
func (o *Objects) cached(ctx context.Context, obj client.Object) (client.Object, error) {
	return getOrNil(ctx, o.client, obj)
}

// readLive reads the object named like obj from the API server; nil when
// there is none.
func (o *Objects) readLive(ctx context.Context, obj client.Object) (client.Object, error) {
	return getOrNil(ctx, o.live, obj)
}

func getOrNil(ctx context.Context, r client.Reader, obj client.Object) (client.Object, error) {
	existing := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
	switch err := r.Get(ctx, client.ObjectKeyFromObject(obj), existing); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return existing, nil
}

// replace deletes an owned object whose immutable field must change; the
// pass waits for the deletion (which brings a watched owner back) and makes
// it again.
func (o *Objects) replace(ctx context.Context, existing client.Object, kind, field string) error {
	key := client.ObjectKeyFromObject(existing)
	ctrl.LoggerFrom(ctx).Info("replacing "+kind+" with a changed "+field, "object", key.String())
	if err := o.client.Delete(ctx, existing, client.Preconditions{UID: ptr.To(existing.GetUID())}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s %s to replace its %s: %w", kind, key, field, err)
	}
	return Wait(fleet.ProgressingReason, CacheLagRetry, "replacing %s %s (its %s cannot change)", kind, key, field)
}

// desired is obj as the apply request: kind and apiVersion set, the fields
// the server owns removed.
func (o *Objects) desired(obj client.Object) (*unstructured.Unstructured, error) {
	gvk, err := o.client.GroupVersionKindFor(obj)
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	u.SetResourceVersion("")
	u.SetCreationTimestamp(metav1.Time{})
	u.SetManagedFields(nil)
	u.SetUID(types.UID(""))
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	return u, nil
}

// immutableChanged names the immutable field whose desired value differs
// from the existing object's, "" when none does.
func immutableChanged(existing, desired client.Object) string {
	switch e := existing.(type) {
	case *rbacv1.RoleBinding:
		if d := desired.(*rbacv1.RoleBinding); d.RoleRef != e.RoleRef {
			return "roleRef"
		}
	case *corev1.Secret:
		if d := desired.(*corev1.Secret); d.Type != "" && d.Type != e.Type {
			return "type"
		}
	}
	return ""
}
