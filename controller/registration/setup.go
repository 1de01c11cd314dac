package registration

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// Field indexes of the manager's cache.
const (
	// clusterClientIDIndex indexes Clusters by spec.clientID.
	clusterClientIDIndex = "fleet.cattle.io/cluster-client-id"
	// registrationClientIDIndex indexes ClusterRegistrations by
	// spec.clientID.
	registrationClientIDIndex = "fleet.cattle.io/registration-client-id"
	// registrationAutoClusterIndex indexes ClusterRegistrations by the name
	// of the Cluster that would be made for them.
	registrationAutoClusterIndex = "fleet.cattle.io/registration-auto-cluster"
	// generatedIndex indexes ServiceAccounts, Roles and RoleBindings by the
	// "<namespace>/<name>" of the registration they were made for.
	generatedIndex = "fleet.cattle.io/generated-for-registration"
)

func indexKey(namespace, name string) string { return namespace + "/" + name }

// SetupWithManager registers the field indexes, the controller and its
// watches. Call it before the manager starts.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Admission == nil {
		return errors.New("the ClusterRegistration reconciler needs an admission policy checker: it grants nothing without one")
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	r.objects = reconciler.NewObjects(r.Client, r.APIReader)
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &fleet.Cluster{}, clusterClientIDIndex, func(o client.Object) []string {
		if id := o.(*fleet.Cluster).Spec.ClientID; id != "" {
			return []string{id}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &fleet.ClusterRegistration{}, registrationClientIDIndex, func(o client.Object) []string {
		return []string{o.(*fleet.ClusterRegistration).Spec.ClientID}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &fleet.ClusterRegistration{}, registrationAutoClusterIndex, func(o client.Object) []string {
		return []string{names.AutoClusterName(o.(*fleet.ClusterRegistration).Spec.ClientID)}
	}); err != nil {
		return err
	}
	for _, obj := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		if err := idx.IndexField(ctx, obj, generatedIndex, func(o client.Object) []string {
			if req, ok := registrationOf(o); ok {
				return []string{indexKey(req.Namespace, req.Name)}
			}
			return nil
		}); err != nil {
			return err
		}
	}

	generated := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := registrationOf(o)
		return ok
	}))
	byLabels := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if req, ok := registrationOf(o); ok {
			return []reconcile.Request{{NamespacedName: req}}
		}
		return nil
	})
	// Many workers; Reconcile locks per clientID, so registrations of one
	// cluster are still handled one at a time.
	return ctrl.NewControllerManagedBy(mgr).
		WithOptions(controller.Options{MaxConcurrentReconciles: 16}).
		Named(ControllerName).
		For(&fleet.ClusterRegistration{}).
		Watches(&fleet.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.registrationsForCluster)).
		// A token's approval mode or limit changed.
		Watches(&fleet.ClusterRegistrationToken{}, handler.EnqueueRequestsFromMapFunc(r.registrationsForToken)).
		// The admission policies came back (or went).
		WatchesRawSource(source.Channel(r.Admission.Subscribe(), handler.EnqueueRequestsFromMapFunc(r.pendingRegistrations))).
		Watches(&corev1.ServiceAccount{}, byLabels, generated).
		Watches(&rbacv1.Role{}, byLabels, generated).
		Watches(&rbacv1.RoleBinding{}, byLabels, generated).
		Complete(r)
}

// registrationOf reads the registration an object was made for from its
// labels.
func registrationOf(o client.Object) (types.NamespacedName, bool) {
	l := o.GetLabels()
	name, ns := l[registration.RegistrationLabel], l[registration.RegistrationNamespaceLabel]
	if name == "" || ns == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// registrationsForToken maps a token to the registrations made with it that
// are not granted yet.
func (r *Reconciler) registrationsForToken(ctx context.Context, o client.Object) []reconcile.Request {
	return r.pending(ctx, client.InNamespace(o.GetNamespace()), client.MatchingLabels{fleet.RegistrationTokenLabel: o.GetName()})
}

// pendingRegistrations maps a change of the admission policies to every
// registration not granted yet.
func (r *Reconciler) pendingRegistrations(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.pending(ctx)
}

func (r *Reconciler) pending(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	list := &fleet.ClusterRegistrationList{}
	if err := r.Client.List(ctx, list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing ClusterRegistrations not granted yet")
		return nil
	}
	var reqs []reconcile.Request
	for _, reg := range list.Items {
		if !reg.Status.Granted {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: reg.Namespace, Name: reg.Name}})
		}
	}
	return reqs
}

// registrationsForCluster maps a Cluster to the registrations waiting on
// it: those of its clientID, and those whose cluster-<hash> name it holds.
func (r *Reconciler) registrationsForCluster(ctx context.Context, o client.Object) []reconcile.Request {
	c := o.(*fleet.Cluster)
	seen := map[types.NamespacedName]bool{}
	var reqs []reconcile.Request
	add := func(field, value string) {
		list := &fleet.ClusterRegistrationList{}
		if err := r.Client.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingFields{field: value}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing ClusterRegistrations for a Cluster", "cluster", c.Namespace+"/"+c.Name)
			return
		}
		for _, reg := range list.Items {
			key := types.NamespacedName{Namespace: reg.Namespace, Name: reg.Name}
			if reg.Status.Granted || seen[key] {
				continue
			}
			seen[key] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: key})
		}
	}
	if c.Spec.ClientID != "" {
		add(registrationClientIDIndex, c.Spec.ClientID)
	}
	add(registrationAutoClusterIndex, c.Name)
	return reqs
}
