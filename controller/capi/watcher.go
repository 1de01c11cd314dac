package capi

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
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

// DefaultPollInterval is how often the controller asks whether the Cluster
// API is served while auto-registration is on and it is not yet: one small
// discovery request (GET /apis/cluster.x-k8s.io). Nothing is asked while
// auto-registration is off, and nothing once the watch runs.
const DefaultPollInterval = 30 * time.Second

// SetupWithManager adds the watcher that starts the CAPI cluster controller
// once auto-registration is on and cluster.x-k8s.io Clusters are served, so
// a controller without the Cluster API installed neither fails nor watches
// anything for it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, pollInterval time.Duration) error {
	if pollInterval <= 0 {
		pollInterval = DefaultPollInterval
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	return mgr.Add(&watcher{
		r: r, mgr: mgr, discovery: dc, interval: pollInterval,
		changes: r.Config.Subscribe(),
		log:     mgr.GetLogger().WithName("capi"),
	})
}

// watcher polls discovery until the Cluster API is served, then adds the
// controller to the running manager and ends. It runs on the leader only,
// like the controller it starts.
type watcher struct {
	r         *Reconciler
	mgr       ctrl.Manager
	discovery discovery.DiscoveryInterface
	interval  time.Duration
	changes   <-chan event.GenericEvent
	log       logr.Logger
}

func (w *watcher) NeedLeaderElection() bool { return true }

func (w *watcher) Start(ctx context.Context) error {
	ticker := time.NewTicker(w.interval)
	defer ticker.Stop()
	announced := false
	for {
		if w.r.Config.Get().CAPIEnabled() {
			gvk, served, err := servedClusterVersion(ctx, w.discovery)
			switch {
			case err != nil:
				w.log.Error(err, "looking for the Cluster API failed; trying again", "every", w.interval)
			case served:
				if err := w.startController(gvk); err != nil {
					return fmt.Errorf("starting Cluster API auto-registration: %w", err)
				}
				w.log.Info("Cluster API found; auto-registering its clusters", "version", gvk.GroupVersion().String())
				return nil
			case !announced:
				w.log.Info("Cluster API auto-registration is on but cluster.x-k8s.io Clusters are not served; looking again", "every", w.interval)
				announced = true
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-w.changes: // turned on: look at once
		}
	}
}

// servedClusterVersion finds the version of cluster.x-k8s.io Clusters to
// watch: v1beta1 when served, else the group's preferred version.
func servedClusterVersion(ctx context.Context, dc discovery.DiscoveryInterface) (schema.GroupVersionKind, bool, error) {
	raw, err := dc.RESTClient().Get().AbsPath("/apis", Group).Do(ctx).Raw()
	if apierrors.IsNotFound(err) {
		return schema.GroupVersionKind{}, false, nil
	}
	if err != nil {
		return schema.GroupVersionKind{}, false, err
	}
	var group metav1.APIGroup
	if err := json.Unmarshal(raw, &group); err != nil {
		return schema.GroupVersionKind{}, false, fmt.Errorf("reading API group %s: %w", Group, err)
	}
	version := group.PreferredVersion.Version
	if slices.ContainsFunc(group.Versions, func(v metav1.GroupVersionForDiscovery) bool { return v.Version == PreferredVersion }) {
		version = PreferredVersion
	}
	if version == "" {
		return schema.GroupVersionKind{}, false, nil
	}
	gv := schema.GroupVersion{Group: Group, Version: version}
	list, err := dc.ServerResourcesForGroupVersion(gv.String())
	if apierrors.IsNotFound(err) {
		return schema.GroupVersionKind{}, false, nil
	}
	if err != nil {
		return schema.GroupVersionKind{}, false, err
	}
	for _, res := range list.APIResources {
		if res.Kind == Kind && !strings.Contains(res.Name, "/") && slices.Contains(res.Verbs, "watch") {
			return gv.WithKind(Kind), true, nil
		}
	}
	return schema.GroupVersionKind{}, false, nil
}

// startController adds the CAPI cluster controller to the running manager.
// It reads metadata only: CAPI clusters' specs and statuses are large and
// none of its business.
func (w *watcher) startController(gvk schema.GroupVersionKind) error {
	w.r.gvk = gvk
	capi := &metav1.PartialObjectMetadata{}
	capi.SetGroupVersionKind(gvk)
	return ctrl.NewControllerManagedBy(w.mgr).
		Named("capi-cluster").
		For(capi, builder.WithPredicates(capiChanged())).
		// The Secret metadata informer is the one the Cluster reconciler
		// already runs; a kubeconfig Secret's arrival lets its cluster in.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(clusterOfKubeconfig), builder.OnlyMetadata,
			builder.WithPredicates(predicate.Funcs{
				UpdateFunc:  func(event.UpdateEvent) bool { return false },
				DeleteFunc:  func(event.DeleteEvent) bool { return false },
				GenericFunc: func(event.GenericEvent) bool { return false },
			})).
		Watches(&fleet.Cluster{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(fleetClusterChanged())).
		WatchesRawSource(source.Channel(w.r.Config.Subscribe(), handler.EnqueueRequestsFromMapFunc(w.r.allCAPIClusters))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(w.r)
}

// capiChanged passes what can change a CAPI cluster's fleet Cluster: its
// arrival and departure, its labels, the start of its deletion. Status
// updates (frequent during provisioning) do not.
func capiChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) ||
				e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	}
}

// fleetClusterChanged passes the removal of any fleet Cluster (a name is
// free again) and changes of auto-registered ones' labels (put back).
// Heartbeats and status changes do not pass.
func fleetClusterChanged() predicate.Predicate {
	ours := func(o client.Object) bool { return o.GetLabels()[fleet.CAPIClusterLabel] != "" }
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return ours(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return (ours(e.ObjectOld) || ours(e.ObjectNew)) && !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// clusterOfKubeconfig maps <name>-kubeconfig to the CAPI cluster <name>.
func clusterOfKubeconfig(_ context.Context, o client.Object) []reconcile.Request {
	name, ok := strings.CutSuffix(o.GetName(), KubeconfigSuffix)
	if !ok || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// allCAPIClusters enqueues every CAPI cluster after a configuration change
// (the opt-in may have changed).
func (r *Reconciler) allCAPIClusters(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(Kind + "List"))
	if err := r.Cache.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing CAPI clusters after a configuration change")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
	}
	return reqs
}
