package reconciler

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StatusPatcher writes the status a pass computed, once, at its end: a JSON
// merge patch of the status alone, under FieldManager, sent only when the
// status differs from the one read. Metadata the pass wrote itself
// meanwhile (a finalizer, an owner reference) is never part of it.
//
// The patcher names the conditions its controller owns: any other
// condition is written back as it was read, so a controller cannot clear
// or change a condition another writer keeps. A merge patch replaces the
// whole list, so a patch that changes the conditions is made against the
// version read (a conflict when another writer, such as fleet-proxy with
// Connected, wrote meanwhile: the pass is retried, rather than its stale
// copy of that condition written back).
type StatusPatcher struct {
	client client.Client
	// status is the object's status as last read or written, as a
	// unstructured value (nil: none).
	status any
	owned  []string
	// manager is the field manager of the patch; "" is FieldManager.
	manager string
}

// NewStatusPatcher remembers obj's status as read. Call it right after
// reading obj, before the pass changes anything.
func NewStatusPatcher(c client.Client, obj client.Object, owned ...string) (*StatusPatcher, error) {
	status, err := statusOf(obj)
	if err != nil {
		return nil, err
	}
	return &StatusPatcher{client: c, status: status, owned: owned}, nil
}

// WithFieldManager makes the patcher write under manager instead of
// FieldManager: for a writer that is not the controller (the agent's
// deployer writes BundleDeployment status as itself).
func (p *StatusPatcher) WithFieldManager(manager string) *StatusPatcher {
	p.manager = manager
	return p
}

// PatchOption changes how Patch writes.
type PatchOption int

const (
	// WithOptimisticLock makes the write fail with a conflict when the
	// object changed since the version obj carries (its resourceVersion):
	// for a status that records a decision made on that version.
	WithOptimisticLock PatchOption = iota + 1
)

// Patch writes obj's status when it differs from the one read (or last
// written). An object deleted meanwhile is not an error.
func (p *StatusPatcher) Patch(ctx context.Context, obj client.Object, opts ...PatchOption) error {
	if err := p.keepUnowned(obj); err != nil {
		return err
	}
	status, err := statusOf(obj)
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(status, p.status) {
		return nil
	}
	before, err := withStatus(obj, p.status)
	if err != nil {
		return err
	}
	var mergeOpts []client.MergeFromOption
	if slices.Contains(opts, WithOptimisticLock) || (len(p.owned) > 0 && !equality.Semantic.DeepEqual(conditionsOf(status), conditionsOf(p.status))) {
		mergeOpts = append(mergeOpts, client.MergeFromWithOptimisticLock{})
	}
	manager := p.manager
	if manager == "" {
		manager = FieldManager
	}
	err = p.client.Status().Patch(ctx, obj, client.MergeFromWithOptions(before, mergeOpts...), client.FieldOwner(manager))
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("patching status of %s %s: %w", KindOf(p.client.Scheme(), obj), client.ObjectKeyFromObject(obj), err)
	}
	// The response is the object as written; the next Patch diffs from it.
	p.status, err = statusOf(obj)
	return err
}

// keepUnowned puts every condition the patcher does not own back as it was
// read.
func (p *StatusPatcher) keepUnowned(obj client.Object) error {
	setter, ok := obj.(ObjectWithConditions)
	if !ok || len(p.owned) == 0 {
		return nil
	}
	read, err := withStatus(obj, p.status)
	if err != nil {
		return err
	}
	was := read.(ObjectWithConditions).GetConditions()
	current := setter.GetConditions()
	var out []metav1.Condition
	for _, c := range current {
		if slices.Contains(p.owned, c.Type) {
			out = append(out, c)
		} else if w := meta.FindStatusCondition(was, c.Type); w != nil {
			out = append(out, *w)
		}
	}
	for _, w := range was {
		if !slices.Contains(p.owned, w.Type) && meta.FindStatusCondition(out, w.Type) == nil {
			out = append(out, w)
		}
	}
	if equality.Semantic.DeepEqual(out, current) {
		return nil
	}
	setter.SetConditions(out)
	return nil
}

// conditionsOf returns the conditions of a status as statusOf gives it.
func conditionsOf(status any) any {
	m, _ := status.(map[string]any)
	return m["conditions"]
}

// statusOf returns obj's status as an unstructured value.
func statusOf(obj client.Object) (any, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return u["status"], nil
}

// withStatus returns a copy of obj with the given status.
func withStatus(obj client.Object, status any) (client.Object, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	if status == nil {
		delete(u, "status")
	} else {
		u["status"] = runtime.DeepCopyJSONValue(status)
	}
	out := obj.DeepCopyObject().(client.Object)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, out); err != nil {
		return nil, err
	}
	return out, nil
}
