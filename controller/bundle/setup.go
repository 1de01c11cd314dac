package bundle

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
)

// SetupWithManager registers the reconciler and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, workers int) error {
	if workers == 0 {
		workers = 4
	}
	r.apiReader = mgr.GetAPIReader()
	return ctrl.NewControllerManagedBy(mgr).
		Named("bundle").
		// Labels too: fleet.AgentBundleLabel on a Bundle reaches its
		// BundleDeployment (or, on a user's Bundle, is refused there).
		For(&fleet.Bundle{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Watches(&fleet.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.bundlesInNamespace), builder.WithPredicates(clusterTargetingChanged())).
		Watches(&fleet.ClusterGroup{}, handler.EnqueueRequestsFromMapFunc(r.bundlesInNamespace), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&fleet.BundleDeployment{}, handler.EnqueueRequestsFromMapFunc(bundleOf)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(bundleOf), builder.OnlyMetadata,
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				// Content Secrets downstream, and a Bundle's contents: a
				// chunk that appears lets a waiting Bundle render.
				return o.GetLabels()[ContentLabel] == "true" || o.GetLabels()[bundlecontent.ContentsLabel] == "true"
			}))).
		// The sources of downstreamResources.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.bundlesCopying), builder.OnlyMetadata).
		// helm.valuesFrom Secrets: a change renders the Bundles reading them.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.bundlesReadingSecret), builder.OnlyMetadata,
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[ContentLabel] != "true" }))).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: workers,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](200*time.Millisecond, 2*time.Minute),
		}).
		Complete(r)
}

// clusterTargetingChanged passes Cluster changes that can change which
// Bundles target it or how: creation, deletion, labels, pause, its
// namespace being assigned, what `${ }` values templates read of it.
func clusterTargetingChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*fleet.Cluster)
			n, ok2 := e.ObjectNew.(*fleet.Cluster)
			if !ok1 || !ok2 {
				return false
			}
			return !equalLabels(o.Labels, n.Labels) || o.Spec.Paused != n.Spec.Paused || templateContextChanged(o, n) ||
				o.Status.Namespace != n.Status.Namespace || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
		},
	}
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func (r *Reconciler) bundlesInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	list := &fleet.BundleList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing bundles", "namespace", o.GetNamespace())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, b := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}})
	}
	return reqs
}

// bundleOf maps a BundleDeployment or content Secret to its Bundle.
func bundleOf(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[fleet.BundleLabel] == "" || l[fleet.BundleNamespaceLabel] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[fleet.BundleNamespaceLabel], Name: l[fleet.BundleLabel]}}}
}
