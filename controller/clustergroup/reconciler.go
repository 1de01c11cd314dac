// Package clustergroup keeps ClusterGroup status: which Clusters the group
// selects, how many are ready, and their BundleDeployments in sum.
package clustergroup

import (
	"context"
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/sharding"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// statusRules are the group's kstatus rules: Ready says whether every
// Cluster it selects is ready.
var statusRules = reconciler.Conditions{Ready: fleet.ReadyCondition, Failing: "counting the group's clusters failed"}

// Reconciler reconciles ClusterGroup status.
type Reconciler struct {
	// Shard is this replica's share of the groups (zero: all).
	Shard  sharding.Shard
	Client client.Client
}

// Reconcile computes one group's status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !r.Shard.OwnsKey(req.String()) {
		return ctrl.Result{}, nil
	}
	g := &fleet.ClusterGroup{}
	if err := r.Client.Get(ctx, req.NamespacedName, g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	clusters := &fleet.ClusterList{}
	if err := r.Client.List(ctx, clusters, client.InNamespace(g.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	patcher, err := reconciler.NewStatusPatcher(r.Client, g, statusRules.Owned()...)
	if err != nil {
		return ctrl.Result{}, err
	}
	// An invalid selector is the user's to fix: the status says so
	// (Stalled), and the group's next change brings it back.
	_ = computeStatus(g, clusters.Items)
	return ctrl.Result{}, patcher.Patch(ctx, g)
}

// computeStatus fills the group's status from the Clusters of its
// namespace. An invalid selector is returned, and reported as Stalled.
func computeStatus(g *fleet.ClusterGroup, clusters []fleet.Cluster) error {
	st := fleet.ClusterGroupStatus{Conditions: g.Status.Conditions, ObservedGeneration: g.Generation}
	var sel labels.Selector = labels.Nothing()
	if g.Spec.Selector != nil {
		s, err := metav1.LabelSelectorAsSelector(g.Spec.Selector)
		if err != nil {
			g.Status = st
			statusRules.Set(g, reconciler.Failure(reconciler.Stall(fleet.TargetsInvalidReason, "spec.selector: %v", err)), time.Now())
			return err
		}
		sel = s
	}
	sort.Slice(clusters, func(i, j int) bool { return clusters[i].Name < clusters[j].Name })
	for i := range clusters {
		c := &clusters[i]
		if !sel.Matches(labels.Set(c.Labels)) {
			continue
		}
		st.ClusterCount++
		if !meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ReadyCondition) {
			st.NonReadyClusterCount++
			if len(st.NonReadyClusters) < 10 {
				st.NonReadyClusters = append(st.NonReadyClusters, c.Name)
			}
		}
		s := c.Status.Summary
		st.Summary.DesiredReady += s.DesiredReady
		st.Summary.Ready += s.Ready
		st.Summary.NotReady += s.NotReady
		st.Summary.WaitApplied += s.WaitApplied
		st.Summary.ErrApplied += s.ErrApplied
		st.Summary.OutOfSync += s.OutOfSync
		st.Summary.Modified += s.Modified
		st.Summary.Pending += s.Pending
	}
	st.Display.ReadyClusters = fmt.Sprintf("%d/%d", st.ClusterCount-st.NonReadyClusterCount, st.ClusterCount)
	st.Display.ReadyBundles = fmt.Sprintf("%d/%d", st.Summary.Ready, st.Summary.DesiredReady)
	g.Status = st
	out := reconciler.Success(fleet.SucceededReason, "")
	if st.NonReadyClusterCount > 0 {
		// Waiting on its Clusters; their changes bring the group back.
		out = reconciler.Failure(reconciler.Wait(fleet.NotReadyReason, 0,
			"%d of %d clusters not ready: %v", st.NonReadyClusterCount, st.ClusterCount, st.NonReadyClusters))
		g.Status.Display.State = string(fleet.NotReady)
	}
	statusRules.Set(g, out, time.Now())
	return nil
}

// SetupWithManager watches groups and the Clusters they may select.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("clustergroup").
		For(&fleet.ClusterGroup{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&fleet.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.groupsInNamespace), builder.WithPredicates(clusterSummaryChanged())).
		Complete(r)
}

func clusterSummaryChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*fleet.Cluster)
		n, ok2 := e.ObjectNew.(*fleet.Cluster)
		if !ok1 || !ok2 {
			return false
		}
		return !equality.Semantic.DeepEqual(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(o.Status.Summary, n.Status.Summary) ||
			meta.IsStatusConditionTrue(o.Status.Conditions, fleet.ReadyCondition) != meta.IsStatusConditionTrue(n.Status.Conditions, fleet.ReadyCondition)
	}}
}

func (r *Reconciler) groupsInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	list := &fleet.ClusterGroupList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, g := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: g.Namespace, Name: g.Name}})
	}
	return reqs
}
