package rollout

import (
	"context"
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
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
)

// key is the one request the rollout reconciler works on.
var key = reconcile.Request{NamespacedName: types.NamespacedName{Name: "agents"}}

// SetupWithManager registers the reconciler: anything that can move the
// rollout (its own AgentRollouts, agent Bundles and their deployments, a
// Cluster's readiness, the configuration) enqueues the one key.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{key} })
	agentLabel := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[fleet.AgentBundleLabel] == "true" })
	return ctrl.NewControllerManagedBy(mgr).
		Named("agentrollout").
		Watches(&fleet.AgentRollout{}, one).
		Watches(&fleet.Bundle{}, one, builder.WithPredicates(agentLabel)).
		Watches(&fleet.BundleDeployment{}, one, builder.WithPredicates(agentLabel)).
		Watches(&fleet.Cluster{}, one, builder.WithPredicates(readinessChanged())).
		WatchesRawSource(source.Channel(r.Config.Subscribe(), one)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

// readinessChanged passes a Cluster's creation, deletion and a change of
// its Ready condition or labels: heartbeats alone move no rollout.
func readinessChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*fleet.Cluster)
			n, ok2 := e.ObjectNew.(*fleet.Cluster)
			if !ok1 || !ok2 {
				return false
			}
			return meta.IsStatusConditionTrue(o.Status.Conditions, fleet.ReadyCondition) != meta.IsStatusConditionTrue(n.Status.Conditions, fleet.ReadyCondition) ||
				!n.DeletionTimestamp.IsZero() && o.DeletionTimestamp.IsZero() ||
				!maps.Equal(o.Labels, n.Labels)
		},
	}
}

// ClustersToReconcile maps a change of an AgentRollout to the Clusters
// whose agent it changes: those a new wave admits, those put back or no
// longer put back, and every planned one when the rollout ends. For the
// Cluster reconciler's watch.
func ClustersToReconcile() handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if ro, ok := e.Object.(*fleet.AgentRollout); ok {
				enqueue(q, affected(nil, ro))
			}
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			o, ok1 := e.ObjectOld.(*fleet.AgentRollout)
			n, ok2 := e.ObjectNew.(*fleet.AgentRollout)
			if ok1 && ok2 {
				enqueue(q, affected(o, n))
			}
		},
	}
}

func enqueue(q workqueue.TypedRateLimitingInterface[reconcile.Request], keys map[string]bool) {
	for k := range keys {
		ns, name, ok := strings.Cut(k, "/")
		if ok {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
		}
	}
}

// affected is the set of Clusters whose Gate decision may differ between
// two versions of a rollout (old nil: it was just made).
func affected(old, cur *fleet.AgentRollout) map[string]bool {
	out := map[string]bool{}
	admitted := func(ro *fleet.AgentRollout) map[string]bool {
		m := map[string]bool{}
		if ro == nil {
			return m
		}
		n := len(ro.Status.Waves)
		upTo := min(int(ro.Status.Wave)+1, n)
		if ro.Status.Phase == fleet.RolloutComplete {
			upTo = n
		}
		for i := 0; i < upTo; i++ {
			for _, k := range ro.Status.Waves[i].Clusters {
				m[k] = true
			}
		}
		for _, k := range ro.Status.RolledBack {
			m["back:"+k] = true
		}
		if ro.Spec.Aborted || ro.Status.Phase == fleet.RolloutAborted {
			m["aborted"] = true
		}
		return m
	}
	a, b := admitted(old), admitted(cur)
	if a["aborted"] != b["aborted"] || (old != nil && old.Status.Phase != cur.Status.Phase && (cur.Status.Phase == fleet.RolloutComplete || cur.Status.Phase == fleet.RolloutAborted)) {
		for _, w := range cur.Status.Waves {
			for _, k := range w.Clusters {
				out[k] = true
			}
		}
	}
	for k := range a {
		if !b[k] {
			out[k] = true
		}
	}
	for k := range b {
		if !a[k] {
			out[k] = true
		}
	}
	delete(out, "aborted")
	for k := range out {
		if rest, ok := strings.CutPrefix(k, "back:"); ok {
			delete(out, k)
			out[rest] = true
		}
	}
	return out
}
