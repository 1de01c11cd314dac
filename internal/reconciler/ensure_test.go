package reconciler_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// labelOwner owns the objects labelled owner=<name>.
type labelOwner struct {
	name string
	// beforeApply, when set, runs after the ownership check and before the
	// write: a test puts someone else's object in the way there.
	beforeApply func()
}

func (o labelOwner) Check(existing client.Object) error {
	if existing.GetLabels()["owner"] != o.name {
		return reconciler.Wait("ObjectConflict", reconciler.ConflictRetry, "%s is not %s's", existing.GetName(), o.name)
	}
	return nil
}

func (o labelOwner) Own(obj client.Object) error {
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l["owner"] = o.name
	obj.SetLabels(l)
	if o.beforeApply != nil {
		o.beforeApply()
	}
	return nil
}

func objects() *reconciler.Objects {
	return reconciler.NewObjects(env.Upstream.Client, env.Upstream.Client)
}

func serviceAccount(ns, name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, AutomountServiceAccountToken: ptr.To(false)}
}

func appliedBy(o client.Object, manager string, op metav1.ManagedFieldsOperationType) bool {
	return slices.ContainsFunc(o.GetManagedFields(), func(m metav1.ManagedFieldsEntry) bool {
		return m.Manager == manager && m.Operation == op
	})
}

func TestObjects_CreatesWithOneWriteAndNeverWritesAnUnchangedObject(t *testing.T) {
	ns := newNamespace(t)
	o := objects()
	sa := serviceAccount(ns, "sa")
	action, err := o.Ensure(t.Context(), labelOwner{name: "a"}, sa)
	if err != nil || action != reconciler.Created {
		t.Fatalf("first Ensure: %s, %v", action, err)
	}
	if sa.UID == "" || sa.Labels["owner"] != "a" || !appliedBy(sa, apply.FieldManager, metav1.ManagedFieldsOperationUpdate) {
		t.Fatalf("after Ensure the object is not the one in the cluster, made by %s: %+v", apply.FieldManager, sa.ObjectMeta)
	}
	if len(sa.ManagedFields) != 1 {
		t.Errorf("a created object is owned by the apply manager alone: %+v", sa.ManagedFields)
	}
	rv := sa.ResourceVersion
	for range 3 {
		again := serviceAccount(ns, "sa")
		action, err := o.Ensure(t.Context(), labelOwner{name: "a"}, again)
		if err != nil || action != reconciler.Unchanged {
			t.Fatalf("Ensure of an unchanged object: %s, %v", action, err)
		}
		if again.UID != sa.UID || again.ResourceVersion != rv {
			t.Fatalf("unchanged object written or not read back: uid %s→%s, resourceVersion %s→%s", sa.UID, again.UID, rv, again.ResourceVersion)
		}
	}
}

func TestObjects_RevertsWhatSomeoneElseChanged(t *testing.T) {
	ns := newNamespace(t)
	c := env.Upstream.Client
	o := objects()
	rules := []rbacv1.PolicyRule{{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"clusterregistrations"}, Verbs: []string{"create"}}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r"}, Rules: rules}
	if _, err := o.Ensure(t.Context(), labelOwner{name: "a"}, role); err != nil {
		t.Fatal(err)
	}
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}})
	if err := c.Update(t.Context(), role); err != nil {
		t.Fatal(err)
	}
	desired := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r"}, Rules: rules}
	action, err := o.Ensure(t.Context(), labelOwner{name: "a"}, desired)
	if err != nil || action != reconciler.Updated {
		t.Fatalf("Ensure of a widened Role: %s, %v", action, err)
	}
	if len(desired.Rules) != 1 || desired.Rules[0].Verbs[0] != "create" {
		t.Fatalf("rules %+v", desired.Rules)
	}
}

func TestObjects_NeverWritesAnObjectOfSomeoneElse(t *testing.T) {
	ns := newNamespace(t)
	c := env.Upstream.Client
	foreign := serviceAccount(ns, "taken")
	foreign.Labels = map[string]string{"owner": "b"}
	if err := c.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	_, err := objects().Ensure(t.Context(), labelOwner{name: "a"}, serviceAccount(ns, "taken"))
	var w *reconciler.Waiting
	if !errors.As(err, &w) || w.Reason != "ObjectConflict" {
		t.Fatalf("want the owner's conflict, got %v", err)
	}
	got := &corev1.ServiceAccount{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(foreign), got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != foreign.ResourceVersion {
		t.Errorf("the foreign object was written: %+v", got.ObjectMeta)
	}
}

// An object someone else makes between the ownership check (which found
// none) and the apply is not taken over: the apply names a UID no object
// has, so it fails.
func TestObjects_ObjectMadeBySomeoneElseMeanwhileIsNotTaken(t *testing.T) {
	ns := newNamespace(t)
	c := env.Upstream.Client
	foreign := serviceAccount(ns, "raced")
	foreign.Labels = map[string]string{"owner": "b"}
	owner := labelOwner{name: "a", beforeApply: func() {
		if err := c.Create(context.Background(), foreign); err != nil {
			t.Error(err)
		}
	}}
	action, err := objects().Ensure(t.Context(), owner, serviceAccount(ns, "raced"))
	if err == nil {
		t.Fatalf("Ensure over an object made meanwhile succeeded (%s)", action)
	}
	got := &corev1.ServiceAccount{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(foreign), got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != foreign.ResourceVersion || got.Labels["owner"] != "b" {
		t.Errorf("the object made meanwhile was written: %+v", got.ObjectMeta)
	}
	t.Logf("refused with: %v", err)
}

// The same holds when the object that was checked is replaced by someone
// else's before the write.
func TestObjects_ReplacedObjectIsNotTaken(t *testing.T) {
	ns := newNamespace(t)
	c := env.Upstream.Client
	o := objects()
	sa := serviceAccount(ns, "replaced")
	if _, err := o.Ensure(t.Context(), labelOwner{name: "a"}, sa); err != nil {
		t.Fatal(err)
	}
	foreign := serviceAccount(ns, "replaced")
	foreign.Labels = map[string]string{"owner": "a", "made-by": "someone-else"}
	owner := labelOwner{name: "a", beforeApply: func() {
		if err := c.Delete(context.Background(), sa); err != nil {
			t.Error(err)
		}
		if err := c.Create(context.Background(), foreign); err != nil {
			t.Error(err)
		}
	}}
	desired := serviceAccount(ns, "replaced")
	desired.AutomountServiceAccountToken = ptr.To(true)
	if action, err := o.Ensure(t.Context(), owner, desired); err == nil {
		t.Fatalf("Ensure over a replaced object succeeded (%s)", action)
	}
	got := &corev1.ServiceAccount{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(foreign), got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != foreign.ResourceVersion {
		t.Errorf("the replacing object was written: %+v", got)
	}
}

func TestObjects_ReplacesARoleBindingWhoseRoleRefChanged(t *testing.T) {
	ns := newNamespace(t)
	c := env.Upstream.Client
	o := objects()
	binding := func(role string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rb"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "sa"}},
		}
	}
	old := binding("old")
	if _, err := o.Ensure(t.Context(), labelOwner{name: "a"}, old); err != nil {
		t.Fatal(err)
	}
	_, err := o.Ensure(t.Context(), labelOwner{name: "a"}, binding("new"))
	var w *reconciler.Waiting
	if !errors.As(err, &w) || w.Reason != fleet.ProgressingReason || w.RequeueAfter != reconciler.CacheLagRetry {
		t.Fatalf("want a short wait for the replacement, got %v", err)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(old), &rbacv1.RoleBinding{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the RoleBinding with the old roleRef is still there: %v", err)
	}
	now := binding("new")
	if action, err := o.Ensure(t.Context(), labelOwner{name: "a"}, now); err != nil || action != reconciler.Created || now.RoleRef.Name != "new" {
		t.Fatalf("making it again: %s, %v, %+v", action, err, now.RoleRef)
	}
}

// Objects written by the controller before it applied them (create and
// update under reconciler.FieldManager) pass to apply.FieldManager at the
// first apply, so a field fleet no longer sets goes.
func TestObjects_TakesOverTheFieldsOfTheEarlierFieldManager(t *testing.T) {
	ns := newNamespace(t)
	c := env.Upstream.Client
	old := serviceAccount(ns, "upgraded")
	old.Labels = map[string]string{"owner": "a", "dropped": "true"}
	if err := c.Create(t.Context(), old, client.FieldOwner(reconciler.FieldManager)); err != nil {
		t.Fatal(err)
	}
	sa := serviceAccount(ns, "upgraded")
	action, err := objects().Ensure(t.Context(), labelOwner{name: "a"}, sa)
	if err != nil || action != reconciler.Updated {
		t.Fatalf("first apply after the upgrade: %s, %v", action, err)
	}
	if _, ok := sa.Labels["dropped"]; ok {
		t.Errorf("a label only the earlier field manager set is still there: %v", sa.Labels)
	}
	if appliedBy(sa, reconciler.FieldManager, metav1.ManagedFieldsOperationUpdate) {
		t.Errorf("the earlier field manager still owns fields: %+v", sa.ManagedFields)
	}
}

// With ExpectUID, Ensure writes only over what the pass decided on: a
// Secret minted because there was none is not written over one that
// appeared meanwhile, and one reused is not written when it was replaced.
func TestObjects_ExpectUIDWritesOnlyOverWhatThePassSaw(t *testing.T) {
	ns := newNamespace(t)
	c := env.Upstream.Client
	o := objects()
	secret := func(token string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "credential"}, Data: map[string][]byte{"token": []byte(token)}}
	}
	first := secret("first")
	if action, err := o.Ensure(t.Context(), labelOwner{name: "a"}, first, reconciler.ExpectUID("")); err != nil || action != reconciler.Created {
		t.Fatalf("making a Secret expected to be missing: %s, %v", action, err)
	}
	// Another pass that also saw none (and minted another token).
	_, err := o.Ensure(t.Context(), labelOwner{name: "a"}, secret("second"), reconciler.ExpectUID(""))
	if !apierrors.IsAlreadyExists(err) || (reconciler.Outcome{Err: err}).Kind() != reconciler.KindRaced {
		t.Fatalf("want AlreadyExists, got %v", err)
	}
	// A pass that reuses the Secret it saw.
	if action, err := o.Ensure(t.Context(), labelOwner{name: "a"}, secret("first"), reconciler.ExpectUID(first.UID)); err != nil || action != reconciler.Unchanged {
		t.Fatalf("reusing the Secret seen: %s, %v", action, err)
	}
	// ...which was replaced meanwhile.
	if err := c.Delete(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Ensure(t.Context(), labelOwner{name: "a"}, secret("first"), reconciler.ExpectUID(first.UID)); !apierrors.IsConflict(err) {
		t.Fatalf("want a conflict for a Secret gone since the pass read it, got %v", err)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(first), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Secret was made again: %v", err)
	}
}

// TestObjects_SharedKeepsTheControllersOtherFields: an object the controller
// both applies and writes otherwise (a Cluster: clientID and finalizer set
// by the Cluster reconciler) keeps those other fields through an apply with
// Shared, which an apply without it takes over and removes.
func TestObjects_SharedKeepsTheControllersOtherFields(t *testing.T) {
	ctx, c, ns := t.Context(), env.Upstream.Client, newNamespace(t)
	owner := labelOwner{name: "bootstrap"}
	desired := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}, Data: map[string]string{"applied": v}}
	}
	if _, err := objects().Ensure(ctx, owner, desired("1"), reconciler.Shared()); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["other"] = "kept"
	if err := c.Update(ctx, cm, client.FieldOwner(reconciler.FieldManager)); err != nil {
		t.Fatal(err)
	}

	got := desired("2")
	if action, err := objects().Ensure(ctx, owner, got, reconciler.Shared()); err != nil || action != reconciler.Updated {
		t.Fatalf("Ensure = %s, %v", action, err)
	}
	if got.Data["applied"] != "2" || got.Data["other"] != "kept" {
		t.Errorf("with Shared: data %v, want applied=2 and other=kept", got.Data)
	}
	if appliedBy(got, apply.FieldManager, metav1.ManagedFieldsOperationUpdate) {
		t.Errorf("the create's fields were not handed to the apply: %+v", got.ManagedFields)
	}

	got = desired("3")
	if _, err := objects().Ensure(ctx, owner, got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Data["other"]; ok || got.Data["applied"] != "3" {
		t.Errorf("without Shared: data %v, want only applied=3 (the controller's other field taken over and removed)", got.Data)
	}
}

// behindCache is a client that reads through a real informer cache which
// shows no object labelled owner=<anything> (it selects shown=true): the
// objects Ensure makes exist in the API server and not in the cache, as
// right after they were made by an earlier pass.
func behindCache(t *testing.T) client.Client {
	t.Helper()
	cfg := env.Upstream.Config
	c, err := cache.New(cfg, cache.Options{Scheme: env.Upstream.Client.Scheme(), DefaultLabelSelector: labels.SelectorFromSet(labels.Set{"shown": "true"})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	cl, err := client.New(cfg, client.Options{Scheme: env.Upstream.Client.Scheme(), Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// An object the cache does not show is created at once; when the name is
// taken after all, what the API server holds is decided on as if the cache
// had shown it: its owner's object is kept unwritten, someone else's is
// refused and left alone.
func TestObjects_ObjectTheCacheDoesNotShowIsReadWhenTheCreateFindsIt(t *testing.T) {
	ns := newNamespace(t)
	c := env.Upstream.Client
	o := reconciler.NewObjects(behindCache(t), c)

	sa := serviceAccount(ns, "new")
	if action, err := o.Ensure(t.Context(), labelOwner{name: "a"}, sa); err != nil || action != reconciler.Created {
		t.Fatalf("Ensure of a new object: %s, %v", action, err)
	}
	again := serviceAccount(ns, "new")
	action, err := o.Ensure(t.Context(), labelOwner{name: "a"}, again)
	if err != nil || action != reconciler.Unchanged {
		t.Fatalf("Ensure of its own object the cache does not show: %s, %v", action, err)
	}
	if again.UID != sa.UID || again.ResourceVersion != sa.ResourceVersion {
		t.Errorf("its own object was written or not read back: uid %s→%s, resourceVersion %s→%s", sa.UID, again.UID, sa.ResourceVersion, again.ResourceVersion)
	}

	foreign := serviceAccount(ns, "taken")
	foreign.Labels = map[string]string{"owner": "b"}
	if err := c.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	_, err = o.Ensure(t.Context(), labelOwner{name: "a"}, serviceAccount(ns, "taken"))
	var w *reconciler.Waiting
	if !errors.As(err, &w) || w.Reason != "ObjectConflict" {
		t.Fatalf("want the owner's conflict for someone else's object the cache does not show, got %v", err)
	}
	got := &corev1.ServiceAccount{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(foreign), got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != foreign.ResourceVersion || got.Labels["owner"] != "b" {
		t.Errorf("someone else's object was written: %+v", got.ObjectMeta)
	}

	// With ExpectUID of none, a taken name is the conflict the pass retries.
	if _, err := o.Ensure(t.Context(), labelOwner{name: "a"}, serviceAccount(ns, "new"), reconciler.ExpectUID("")); !apierrors.IsAlreadyExists(err) {
		t.Errorf("ExpectUID(\"\") over an existing object the cache does not show: want AlreadyExists, got %v", err)
	}
}
