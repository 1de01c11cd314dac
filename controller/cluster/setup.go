package cluster

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/rollout"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// kubeconfigSecretIndex indexes Clusters by "<namespace>/<name>" of their
// kubeconfig Secret.
const kubeconfigSecretIndex = "fleet.cattle.io/kubeconfig-secret"

// SetupOptions tune the controller.
type SetupOptions struct {
	// MaxConcurrentReconciles defaults to 10.
	MaxConcurrentReconciles int
}

// SetupWithManager registers the reconciler and its watches.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts SetupOptions) error {
	if opts.MaxConcurrentReconciles == 0 {
		opts.MaxConcurrentReconciles = 10
	}
	r.objects = reconciler.NewObjects(r.Client, mgr.GetAPIReader())
	if err := mgr.GetFieldIndexer().IndexField(ctx, &fleet.Cluster{}, kubeconfigSecretIndex, func(o client.Object) []string {
		c := o.(*fleet.Cluster)
		if c.Spec.KubeConfigSecret == "" {
			return nil
		}
		ns := c.Spec.KubeConfigSecretNamespace
		if ns == "" {
			ns = c.Namespace
		}
		return []string{ns + "/" + c.Spec.KubeConfigSecret}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("cluster").
		For(&fleet.Cluster{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{},
			agentStatusChanged()))).
		// The import token: its status (prepared, renewed) and deletion
		// bring the Cluster back; its creation, this reconciler's own, does
		// not: a pass right after it, on a cache that does not show the
		// pass's status write yet, would only fail its status patch and
		// hold up the pass the prepared token brings.
		Owns(&fleet.ClusterRegistrationToken{}, builder.WithPredicates(notCreated)).
		// The recovery identity: its RoleBinding (controlled by the
		// Cluster) and its ServiceAccount (labelled with it), made again
		// when deleted or changed. Their creation (this reconciler's own)
		// brings nothing back: a pass right after, on a cache that may not
		// show its status write yet, would only fail its status patch.
		Owns(&rbacv1.RoleBinding{}, builder.WithPredicates(notCreated)).
		Watches(&corev1.ServiceAccount{}, handler.EnqueueRequestsFromMapFunc(clusterOfRecoveryIdentity), builder.WithPredicates(notCreated)).
		Watches(&fleet.BundleDeployment{}, handler.EnqueueRequestsFromMapFunc(clusterOfDeployment)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.clustersForSecret), builder.OnlyMetadata).
		Watches(&fleet.AgentRollout{}, rollout.ClustersToReconcile()).
		WatchesRawSource(source.Channel(r.Config.Subscribe(), handler.EnqueueRequestsFromMapFunc(r.allClusters))).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			// Downstream clusters that are down stay down for a while: back
			// off to minutes, not to the default's quarter hour.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
		}).
		Complete(r)
}

func (r *Reconciler) clustersForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	list := &fleet.ClusterList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{kubeconfigSecretIndex: o.GetNamespace() + "/" + o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing clusters for secret", "secret", o.GetNamespace()+"/"+o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
	}
	return reqs
}

func (r *Reconciler) allClusters(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &fleet.ClusterList{}
	if err := r.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing clusters after a configuration change")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
	}
	return reqs
}

// agentStatusChanged passes the heartbeats that can change the Cluster's
// status: the first one, one from an agent whose Cluster is not Ready (it
// comes back), and one that reports something new (version, nodes,
// generation). A plain heartbeat of a Ready cluster is not needed: the
// reconcile scheduled for the moment it would count as offline reads the
// latest heartbeat then. This keeps reconciles at one per offline window per
// cluster instead of one per heartbeat.
func agentStatusChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*fleet.Cluster)
			n, ok2 := e.ObjectNew.(*fleet.Cluster)
			if !ok1 || !ok2 {
				return false
			}
			if o.Status.Agent.IdentityPublicKey != n.Status.Agent.IdentityPublicKey {
				// May need recording (a key reported for the first time),
				// whatever lastSeen says (second precision).
				return true
			}
			if o.Status.Agent.LastSeen.Equal(&n.Status.Agent.LastSeen) {
				return false
			}
			if !meta.IsStatusConditionTrue(n.Status.Conditions, fleet.ReadyCondition) {
				return true
			}
			oa, na := o.Status.Agent, n.Status.Agent
			oa.LastSeen, na.LastSeen = metav1.Time{}, metav1.Time{}
			return !equality.Semantic.DeepEqual(oa, na)
		},
	}
}

// notCreated passes every event of an object but its creation.
var notCreated = predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }}

// clusterOfRecoveryIdentity maps a recovery ServiceAccount to its Cluster.
func clusterOfRecoveryIdentity(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if o.GetName() != registration.RecoveryServiceAccountName || l[fleet.ClusterLabel] == "" || l[fleet.ClusterNamespaceLabel] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[fleet.ClusterNamespaceLabel], Name: l[fleet.ClusterLabel]}}}
}

// clusterOfDeployment maps a BundleDeployment to its Cluster.
func clusterOfDeployment(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[fleet.ClusterLabel] == "" || l[fleet.ClusterNamespaceLabel] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[fleet.ClusterNamespaceLabel], Name: l[fleet.ClusterLabel]}}}
}
