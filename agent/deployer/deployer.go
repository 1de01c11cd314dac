// Package deployer is the agent side of a BundleDeployment: it reads the
// BundleDeployments of its cluster namespace upstream and their content
// Secrets (internal/bundlecontent), applies the manifests to the downstream
// cluster through the project's one server-side apply path
// (internal/apply), prunes what left the bundle, keeps an inventory per
// BundleDeployment downstream, and reports health (kstatus) and drift in the
// BundleDeployment's status.
//
// It applies only BundleDeployments labelled for its own cluster, and
// applies each as the agent itself or, when its options name a
// serviceAccount, as that ServiceAccount of the agent's namespace
// (impersonation; see identity.go).
//
// Upstream, the deployer needs only what a cluster's request identity may
// do: get/list/watch BundleDeployments and Secrets in its cluster namespace
// and update/patch bundledeployments/status. It cannot hold a finalizer on a
// BundleDeployment, so a deletion is noticed as a BundleDeployment that is
// gone while its inventory ConfigMap (downstream, in the agent's namespace)
// is still there; that also works across agent restarts.
package deployer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// Options configure a Deployer.
type Options struct {
	// Upstream is the agent's request identity upstream. A token rotated
	// behind the config (BearerTokenFile, WrapTransport) is picked up as
	// client-go does.
	Upstream *rest.Config
	// Namespace is the cluster namespace upstream that holds this cluster's
	// BundleDeployments and their content Secrets.
	Namespace string
	// Local is the downstream cluster (cluster-admin).
	Local *rest.Config
	// AgentNamespace is the agent's own namespace downstream; the inventory
	// ConfigMaps live there, and so do the ServiceAccounts that Bundles name
	// in options.serviceAccount.
	AgentNamespace string
	// ClusterName and ClusterNamespace are the agent's own Cluster and its
	// workspace upstream, as its credential names them. Only
	// BundleDeployments labelled for exactly this cluster are applied, and
	// the one of them also labelled fleet.AgentBundleLabel is the agent's
	// own Bundle.
	ClusterName      string
	ClusterNamespace string

	// ResyncInterval is how often an applied BundleDeployment is checked
	// again for drift and health. Default 30s.
	ResyncInterval time.Duration
	// HealthTimeout is how long resources may take to become ready after an
	// apply before the BundleDeployment reports HealthTimeout. Default 2m;
	// spec.options.helm.timeoutSeconds overrides it when > 0.
	HealthTimeout time.Duration
	// Workers is the number of BundleDeployments handled at once. Default 4.
	Workers int
}

func (o *Options) defaults() error {
	switch {
	case o.Upstream == nil:
		return errors.New("deployer: no upstream configuration")
	case o.Local == nil:
		return errors.New("deployer: no local cluster configuration")
	case o.Namespace == "":
		return errors.New("deployer: no cluster namespace")
	case o.AgentNamespace == "":
		return errors.New("deployer: no agent namespace")
	case o.ClusterName == "" || o.ClusterNamespace == "":
		return errors.New("deployer: no cluster name or workspace")
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = 30 * time.Second
	}
	if o.HealthTimeout <= 0 {
		o.HealthTimeout = 2 * time.Minute
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	return nil
}

// Deployer applies the BundleDeployments of one cluster namespace to the
// downstream cluster.
type Deployer struct {
	opts Options
	log  logr.Logger

	mgr      manager.Manager
	up       client.Client // cached BundleDeployments, status writes
	upReader client.Reader // uncached: content Secrets, deletion checks
	// local is the agent's own identity downstream: inventories, namespace
	// and ServiceAccount lookups. self applies as the agent; imp holds the
	// identities of ServiceAccounts that bundles name.
	local client.Client
	self  *identity
	imp   impersonators
	inv   *inventoryStore

	// orphans feeds the reconciler the names of inventories found at start,
	// so BundleDeployments deleted while the agent was down are pruned.
	orphans chan event.GenericEvent

	// reconciles counts Reconcile calls (tests).
	reconciles atomic.Int64
}

// New checks the options and assembles the deployer; nothing runs until Run.
func New(opts Options) (*Deployer, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	log := ctrl.Log.WithName("deployer").WithValues("clusterNamespace", opts.Namespace, "cluster", opts.ClusterNamespace+"/"+opts.ClusterName)
	local, err := client.New(rest.CopyConfig(opts.Local), client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the local cluster: %w", err)
	}
	up := rest.CopyConfig(opts.Upstream)
	if up.UserAgent == "" {
		up.UserAgent = "fleet-agent-deployer"
	}
	mgr, err := ctrl.NewManager(up, ctrl.Options{
		Scheme: scheme.Scheme,
		Logger: log,
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{opts.Namespace: {}},
			DefaultTransform:  cache.TransformStripManagedFields(),
		},
		Client: client.Options{Cache: &client.CacheOptions{
			// Content Secrets are read on demand: only their metadata is
			// watched, their data is never kept in memory.
			DisableFor: []client.Object{&corev1.Secret{}},
		}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		// Several agents (benchmarks, tests) may run in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the upstream manager: %w", err)
	}
	d := &Deployer{
		opts:     opts,
		log:      log,
		mgr:      mgr,
		up:       mgr.GetClient(),
		upReader: mgr.GetAPIReader(),
		local:    local,
		self:     &identity{c: local, rm: apply.NewManager(local)},
		imp:      impersonators{byName: map[string]*identity{}},
		inv:      newInventoryStore(local, opts.AgentNamespace),
		orphans:  make(chan event.GenericEvent),
	}
	if err := d.setup(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Deployer) setup() error {
	err := ctrl.NewControllerManagedBy(d.mgr).
		Named("bundledeployment-deployer").
		// Status writes (ours) change neither the generation nor the
		// labels: they must not wake the reconciler again. A label change
		// may make a refused BundleDeployment this cluster's.
		For(&fleet.BundleDeployment{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		// Content and chunk Secrets (content.go).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(contentOf)).
		// Another BundleDeployment's state, labels or dependsOn may
		// unblock one waiting for its dependencies (dependencies.go).
		Watches(&fleet.BundleDeployment{}, handler.EnqueueRequestsFromMapFunc(d.dependentsOf), builder.WithPredicates(dependencyChanged())).
		WatchesRawSource(source.Channel(d.orphans, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: d.opts.Workers,
			// Failures (API errors, kinds the cluster does not serve yet)
			// back off from 1s to 5m per BundleDeployment.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
		}).
		Complete(d)
	if err != nil {
		return fmt.Errorf("setting up the BundleDeployment controller: %w", err)
	}
	// Inventories whose BundleDeployment is gone (deleted while the agent
	// was down) are reconciled once at start: the reconciler prunes them.
	return d.mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		names, err := d.inv.list(ctx)
		if err != nil {
			d.log.Error(err, "listing inventories at start; BundleDeployments deleted while the agent was down are pruned only when seen again")
			return nil
		}
		for _, name := range names {
			bd := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: d.opts.Namespace, Name: name}}
			select {
			case d.orphans <- event.GenericEvent{Object: bd}:
			case <-ctx.Done():
				return nil
			}
		}
		return nil
	}))
}

// Run runs the deployer until ctx ends. It returns an error only when it
// cannot start (for example, when its caches cannot sync for lack of
// permissions).
func (d *Deployer) Run(ctx context.Context) error {
	d.log.Info("starting", "agentNamespace", d.opts.AgentNamespace, "workers", d.opts.Workers)
	return reconciler.RunManager(ctx, d.mgr, reconciler.ManagerStopWithin)
}
