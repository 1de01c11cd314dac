// Package controller assembles the upstream controller (`fleet controller`):
// one controller-runtime manager running the reconcilers of the
// subpackages, with leader election, health and readiness probes, Prometheus
// metrics and the live controller configuration.
package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gitops-fleet/fleet/controller/admission"
	"github.com/gitops-fleet/fleet/controller/bootstrap"
	"github.com/gitops-fleet/fleet/controller/bundle"
	"github.com/gitops-fleet/fleet/controller/capi"
	"github.com/gitops-fleet/fleet/controller/cluster"
	"github.com/gitops-fleet/fleet/controller/clustergroup"
	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/controller/manageroptions"
	"github.com/gitops-fleet/fleet/controller/metrics"
	"github.com/gitops-fleet/fleet/controller/registration"
	"github.com/gitops-fleet/fleet/controller/remote"
	"github.com/gitops-fleet/fleet/controller/rendererconn"
	"github.com/gitops-fleet/fleet/controller/rollout"
	"github.com/gitops-fleet/fleet/controller/sharding"
	"github.com/gitops-fleet/fleet/controller/token"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/renderservice"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/internal/scheme"
	"github.com/gitops-fleet/fleet/renderer"
)

const (
	// DefaultQPS and DefaultBurst bound the controller's requests to the
	// upstream API server when Options set no other (client side; the
	// server's priority and fairness still applies). client-go's default of
	// 20 requests per second would cap registration at about one cluster
	// per second.
	DefaultQPS   = 500
	DefaultBurst = 1000
)

// Options configure the controller process.
type Options struct {
	// RestConfig reaches the upstream cluster.
	RestConfig *rest.Config
	// Namespace is the system namespace holding the fleet-controller
	// ConfigMap and the leader election Lease.
	Namespace string
	// ConfigName is the controller ConfigMap's name.
	ConfigName string
	// InitialConfig is in force until the ConfigMap is read (nil: defaults).
	InitialConfig *config.Config

	MetricsAddress string
	ProbeAddress   string
	// PprofAddress serves net/http/pprof when set (off by default).
	PprofAddress string

	LeaderElect   bool
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	// Workers is the number of concurrent Cluster reconciles.
	Workers int
	// BundleWriters is how many clusters' BundleDeployments one Bundle
	// reconcile writes at once (zero: bundle.DefaultWriters).
	BundleWriters int

	// Shard is this replica's share of the work when several controllers
	// split it; each shard elects its own leader.
	Shard sharding.Shard

	// QPS and Burst bound the controller's requests to the upstream API
	// server. Zero: DefaultQPS and DefaultBurst.
	QPS   float32
	Burst int

	// CredentialPickupTimeout is how long a granted registration's
	// credential Secret is kept (zero: registration.CredentialPickupTimeout).
	CredentialPickupTimeout time.Duration

	// CAPIPollInterval is how often, while Cluster API auto-registration is
	// on, the controller looks for the cluster.x-k8s.io API until it is
	// served (zero: capi.DefaultPollInterval).
	CAPIPollInterval time.Duration

	// AdmissionPolicyResync is how often the installed admission policies
	// are compared with the shipped ones without a watch event (zero:
	// admission.DefaultResync).
	AdmissionPolicyResync time.Duration

	// RendererURL is the renderer service (https) Bundles render in, apart
	// from the controller's pod. Empty: render workers run as children of
	// the controller, in its pod, with its credential at hand (weaker).
	RendererURL string
	// RendererSecret names the Secret in Namespace holding the renderer's
	// credentials (zero: renderservice.SecretName).
	RendererSecret string
}

// Controller is an assembled, not yet started, controller.
type Controller struct {
	Manager manager.Manager
	Config  *configstore.Store
	// Admission reports whether fleet's admission policies are in force.
	Admission *admission.Checker
}

// New assembles the controller.
func New(ctx context.Context, opts Options) (*Controller, error) {
	if opts.ConfigName == "" {
		opts.ConfigName = config.ConfigMapName
	}
	if opts.Namespace == "" {
		opts.Namespace = config.DefaultSystemNamespace
	}
	if opts.BundleWriters < 0 {
		return nil, fmt.Errorf("--bundle-writers is %d: give a number of clusters written at once, at least 1", opts.BundleWriters)
	}
	restCfg := rest.CopyConfig(opts.RestConfig)
	restCfg.UserAgent = "fleet-controller"
	restCfg.QPS, restCfg.Burst = DefaultQPS, DefaultBurst
	if opts.QPS > 0 {
		restCfg.QPS = opts.QPS
	}
	if opts.Burst > 0 {
		restCfg.Burst = opts.Burst
	}
	mgrOpts := manageroptions.New(opts.Namespace)
	mgrOpts.Metrics = metricsserver.Options{BindAddress: opts.MetricsAddress}
	mgrOpts.HealthProbeBindAddress = opts.ProbeAddress
	mgrOpts.PprofBindAddress = opts.PprofAddress
	mgrOpts.LeaderElection = opts.LeaderElect
	mgrOpts.LeaderElectionID = opts.Shard.LeaseName("fleet-controller-lock")
	mgrOpts.LeaderElectionNamespace = opts.Namespace
	mgrOpts.LeaderElectionReleaseOnCancel = true
	if opts.LeaseDuration > 0 {
		mgrOpts.LeaseDuration, mgrOpts.RenewDeadline, mgrOpts.RetryPeriod = &opts.LeaseDuration, &opts.RenewDeadline, &opts.RetryPeriod
	}
	mgr, err := ctrl.NewManager(restCfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	if err := opts.Shard.Validate(); err != nil {
		return nil, err
	}
	clientset, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	agentRenderer, err := renderer.NewAgentRenderer()
	if err != nil {
		return nil, fmt.Errorf("loading the embedded agent chart: %w", err)
	}
	store := configstore.New(opts.Namespace, opts.ConfigName, opts.InitialConfig)
	if err := store.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	events := mgr.GetEventRecorder("fleet-controller")
	// Registration is granted only while fleet's admission policies are in
	// force; the checker runs on every replica, for /readyz.
	policies, err := admission.New(mgr.GetCache(), admission.Options{
		Recorder:  events,
		Regarding: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.ConfigName}},
		Resync:    opts.AdmissionPolicyResync,
	})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(policies); err != nil {
		return nil, err
	}
	gate := &rollout.Gate{Reader: mgr.GetClient()}
	if err := (&cluster.Reconciler{
		Gate:      gate,
		Shard:     opts.Shard,
		Client:    mgr.GetClient(),
		Config:    store,
		Cache:     mgr.GetCache(),
		APIReader: mgr.GetAPIReader(),
		Renderer:  agentRenderer,
		Remotes:   remote.NewCache(scheme.Scheme),
		Recorder:  events,
	}).SetupWithManager(ctx, mgr, cluster.SetupOptions{MaxConcurrentReconciles: opts.Workers}); err != nil {
		return nil, err
	}
	if err := (&token.Reconciler{
		Shard:     opts.Shard,
		Client:    mgr.GetClient(),
		Config:    store,
		Clientset: clientset,
		Recorder:  events,
	}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&registration.Reconciler{
		Shard:                   opts.Shard,
		APIReader:               mgr.GetAPIReader(),
		Client:                  mgr.GetClient(),
		Config:                  store,
		Clientset:               clientset,
		Recorder:                events,
		CredentialPickupTimeout: opts.CredentialPickupTimeout,
		Admission:               policies,
	}).SetupWithManager(ctx, mgr); err != nil {
		return nil, err
	}
	bundleRenderer, err := newBundleRenderer(mgr, opts, func() renderworker.Limits { return renderworker.LimitsOf(store.Get()) })
	if err != nil {
		return nil, err
	}
	if err := (&bundle.Reconciler{
		Shard:     opts.Shard,
		Client:    mgr.GetClient(),
		Cache:     mgr.GetCache(),
		Recorder:  events,
		Renderer:  bundleRenderer,
		APIReader: mgr.GetAPIReader(),
		Writers:   opts.BundleWriters,
	}).SetupWithManager(mgr, 0); err != nil {
		return nil, err
	}
	if err := (&rollout.Reconciler{
		Shard:    opts.Shard,
		Client:   mgr.GetClient(),
		Config:   store,
		Renderer: agentRenderer,
		Recorder: events,
	}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&clustergroup.Reconciler{Shard: opts.Shard, Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&capi.Reconciler{
		Shard:    opts.Shard,
		Client:   mgr.GetClient(),
		Cache:    mgr.GetCache(),
		Config:   store,
		Recorder: events,
	}).SetupWithManager(mgr, opts.CAPIPollInterval); err != nil {
		return nil, err
	}
	// The local cluster: its kubeconfig reaches the API server as the
	// controller does (in a pod, the in-cluster address and CA).
	server, err := bootstrap.ServerOf(restCfg)
	if err != nil {
		return nil, err
	}
	if err := (&bootstrap.Reconciler{
		Shard:     opts.Shard,
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Config:    store,
		Clientset: clientset,
		Recorder:  events,
		Namespace: opts.Namespace,
		Server:    server,
	}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	// fleet_clusters counts every Cluster from this replica's cache while it
	// leads shard 0, so that one replica reports each Cluster once.
	if opts.Shard.Index == 0 {
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			stop := metrics.ReportClusters(mgr.GetCache())
			<-ctx.Done()
			stop()
			return nil
		})); err != nil {
			return nil, err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("config", store.ReadyCheck); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("admission-policies", policies.ReadyCheck); err != nil {
		return nil, err
	}
	return &Controller{Manager: mgr, Config: store, Admission: policies}, nil
}

// newBundleRenderer returns what renders the authors' Bundles, under the
// limits of the configuration in force: the renderer service when
// opts.RendererURL is set (its credentials kept by a rendererconn.Keeper
// that runs on the leader, its pods found through its Service), else render
// workers that are child processes of this binary.
func newBundleRenderer(mgr manager.Manager, opts Options, limits func() renderworker.Limits) (bundle.BundleRenderer, error) {
	if opts.RendererURL == "" {
		return renderworker.NewPool(limits)
	}
	u, err := renderservice.ParseURL(opts.RendererURL)
	if err != nil {
		return nil, err
	}
	keeper := &rendererconn.Keeper{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
		Namespace: opts.Namespace, Name: opts.RendererSecret, Host: u.Hostname(),
	}
	if err := mgr.Add(keeper); err != nil {
		return nil, err
	}
	// A Service name is reached through its EndpointSlices, whatever the
	// cluster's DNS and service proxy.
	var resolver renderservice.Resolver
	if e := rendererconn.EndpointsOf(mgr.GetAPIReader(), u.Hostname()); e != nil {
		resolver = e
	}
	return renderservice.NewClient(opts.RendererURL, keeper, resolver, limits)
}

// Start runs the controller until ctx ends.
func (c *Controller) Start(ctx context.Context) error {
	return reconciler.RunManager(ctx, c.Manager, reconciler.ManagerStopWithin)
}
