package controller

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/manageroptions"
	"github.com/gitops-fleet/fleet/gitops/gitsource"
)

// SetupWithManager registers the reconciler, its watches and the cache's
// periodic prune with mgr.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("gitrepo").
		// Spec changes (forceSyncGeneration included) move the generation;
		// the reconciler's own status writes do not bring it back.
		For(&fleet.GitRepo{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Its Bundles and BundleDeployments: the status only (the pass is
		// not due for git). A Bundle deleted by someone else is written
		// again at once.
		Watches(&fleet.Bundle{}, r.bundleHandler()).
		Watches(&fleet.BundleDeployment{}, handler.EnqueueRequestsFromMapFunc(gitRepoOfDeployment)).
		// A restriction changes what every GitRepo of its namespace may do.
		Watches(&fleet.GitRepoRestriction{}, handler.EnqueueRequestsFromMapFunc(r.gitReposOfNamespace)).
		// Trigger: webhooks and forced syncs.
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			r.setQueue(q)
			return nil
		})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.opts.Concurrency,
			// A git server that is down stays down for a while: back off to
			// minutes.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
		})
	if r.opts.Config != nil {
		// allowGitInsecureSkipTLSVerify may change what is accepted.
		b = b.WatchesRawSource(source.Channel(r.opts.Config.Subscribe(), handler.EnqueueRequestsFromMapFunc(r.allGitRepos)))
	}
	if err := b.Complete(r); err != nil {
		return err
	}
	return mgr.Add(manager.RunnableFunc(r.pruneCache))
}

// bundleHandler queues a Bundle's GitRepo; a deleted Bundle also makes the
// GitRepo's next pass read and write again (someone deleted it by hand, or
// the pass pruned it).
func (r *Reconciler) bundleHandler() handler.EventHandler {
	add := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request], deleted bool) {
		name := o.GetLabels()[fleet.RepoLabel]
		if name == "" {
			return
		}
		key := types.NamespacedName{Namespace: o.GetNamespace(), Name: name}
		if deleted {
			r.markDirty(key)
		}
		q.Add(reconcile.Request{NamespacedName: key})
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q, false)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.ObjectNew, q, false)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q, true)
		},
	}
}

func gitRepoOfDeployment(_ context.Context, o client.Object) []reconcile.Request {
	name, ns := o.GetLabels()[fleet.RepoLabel], o.GetLabels()[fleet.BundleNamespaceLabel]
	if name == "" || ns == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

func (r *Reconciler) gitReposOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	return r.gitRepos(ctx, client.InNamespace(o.GetNamespace()))
}

func (r *Reconciler) allGitRepos(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.gitRepos(ctx)
}

func (r *Reconciler) gitRepos(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	list := &fleet.GitRepoList{}
	if err := r.client.List(ctx, list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing GitRepos")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, g := range list.Items {
		key := types.NamespacedName{Namespace: g.Namespace, Name: g.Name}
		r.markDirty(key)
		reqs = append(reqs, reconcile.Request{NamespacedName: key})
	}
	return reqs
}

// pruneCache removes, every PruneInterval, the cache entries of
// repositories and refs no GitRepo names any more.
func (r *Reconciler) pruneCache(ctx context.Context) error {
	t := time.NewTicker(r.opts.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := r.PruneCache(ctx); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "pruning the git cache")
		}
	}
}

// PruneCache removes the cache entries no GitRepo uses now.
func (r *Reconciler) PruneCache(ctx context.Context) error {
	list := &fleet.GitRepoList{}
	if err := r.client.List(ctx, list); err != nil {
		return err
	}
	var keys []gitsource.Key
	for _, g := range list.Items {
		k, err := gitsource.KeyOf(gitsource.Repository{URL: g.Spec.Repo, Branch: g.Spec.Branch, Revision: g.Spec.Revision})
		if err == nil {
			keys = append(keys, k)
		}
	}
	return r.opts.Cache.Prune(keys)
}

// ManagerOptions are the options of the source component's manager: the
// fleet controller's (Secrets never cached, the one ConfigMap of the system
// namespace) with Bundles cached without their resources and
// BundleDeployments without their spec: the reconciler reads their labels,
// annotations, owners and status, and 500 Bundles of 1 MB must not sit in
// its memory.
func ManagerOptions(systemNamespace string) ctrl.Options {
	opts := manageroptions.New(systemNamespace)
	strip := cache.TransformStripManagedFields()
	if opts.Cache.ByObject == nil {
		opts.Cache.ByObject = map[client.Object]cache.ByObject{}
	}
	opts.Cache.ByObject[&fleet.Bundle{}] = cache.ByObject{Transform: func(i any) (any, error) {
		if b, ok := i.(*fleet.Bundle); ok {
			b.Spec.Resources = nil
		}
		return strip(i)
	}}
	opts.Cache.ByObject[&fleet.BundleDeployment{}] = cache.ByObject{Transform: func(i any) (any, error) {
		if bd, ok := i.(*fleet.BundleDeployment); ok {
			bd.Spec = fleet.BundleDeploymentSpec{}
		}
		return strip(i)
	}}
	return opts
}
