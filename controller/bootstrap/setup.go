package bootstrap

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// SetupWithManager registers the controller: every object it keeps, the
// ServiceAccount and the configuration bring the one local cluster back. It
// subscribes to configuration changes, so call it before the manager
// starts. The manager's first pass (the configuration is published once
// the ConfigMap is read, and the watches list what exists) does the first
// bootstrap.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.objects = reconciler.NewObjects(r.Client, r.APIReader)
	inBootstrapNS := func(name string) predicate.Predicate {
		return predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetName() == name && o.GetNamespace() == r.Config.Get().GetBootstrapNamespace()
		})
	}
	isServiceAccount := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetName() == ServiceAccountName && o.GetNamespace() == r.Namespace
	})
	local := handler.EnqueueRequestsFromMapFunc(r.local)
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		// Spec and label changes, and deletion: not the heartbeats.
		For(&fleet.Cluster{}, builder.WithPredicates(inBootstrapNS(config.LocalClusterName), predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, deleting()))).
		Watches(&corev1.Secret{}, local, builder.OnlyMetadata, builder.WithPredicates(inBootstrapNS(SecretName))).
		Watches(&fleet.ClusterGroup{}, local, builder.WithPredicates(inBootstrapNS(GroupName), predicate.GenerationChangedPredicate{})).
		Watches(&corev1.ServiceAccount{}, local, builder.WithPredicates(isServiceAccount)).
		WatchesRawSource(source.Channel(r.Config.Subscribe(), local)).
		Complete(r)
}

// local is the one request of the controller: the local Cluster's key in
// the bootstrap namespace in force.
func (r *Reconciler) local(context.Context, client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: r.Config.Get().GetBootstrapNamespace(), Name: config.LocalClusterName}}}
}

// deleting passes the update that marks an object deleted.
func deleting() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}
