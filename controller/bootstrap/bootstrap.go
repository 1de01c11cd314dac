// Package bootstrap keeps the local cluster: the cluster the controller runs
// in, registered as Cluster "local" in the bootstrap namespace (fleet-local),
// as Fleet does. It makes the workspace namespace, the kubeconfig Secret
// "local-cluster" (the controller's own API server address and CA and a
// short-lived token of ServiceAccount fleet-controller-bootstrap, renewed
// before it expires), the Cluster and ClusterGroup "default" selecting it.
// Everything else is the Cluster reconciler's, exactly as for any
// manager-initiated cluster: there is no other local-cluster code.
//
// Turned off (bootstrap.enabled false), it makes nothing and deletes
// nothing.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/controller/sharding"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// ControllerName names the controller (logs, metrics).
const ControllerName = "bootstrap"

// Names of what the bootstrap makes and uses, as Fleet names them.
const (
	// ServiceAccountName is the local cluster's identity, in the
	// controller's namespace (made by charts/fleet, bound to cluster-admin).
	ServiceAccountName = "fleet-controller-bootstrap"
	// SecretName is the local cluster's kubeconfig Secret in the bootstrap
	// namespace.
	SecretName = "local-cluster"
	// GroupName is the ClusterGroup selecting the local cluster.
	GroupName = "default"
	// NameLabel carries the Cluster's name ("local"), what Fleet's
	// ClusterGroup default selects.
	NameLabel = "name"
	// Label marks what the bootstrap made: only objects carrying it are
	// ever changed by it.
	Label = "fleet.cattle.io/bootstrap"
)

const (
	// TokenLifetime is the lifetime asked for the local cluster's token. It
	// is renewed when a third of it is left, so a controller that was down
	// for up to two thirds of it finds it still working.
	TokenLifetime = 24 * time.Hour
	renewFraction = 3
	// missingRetry is how often a pass looks again while the ServiceAccount
	// is missing (its creation is watched too: this is a safety net).
	missingRetry = 5 * time.Minute
)

// Event reasons.
const (
	// BootstrappedReason: the local Cluster was made (again).
	BootstrappedReason = "Bootstrapped"
	// ObjectConflictReason: an object of the local cluster's name exists
	// and was not made by the bootstrap.
	ObjectConflictReason = "ObjectConflict"
	// ServiceAccountMissingReason: the bootstrap identity is not installed.
	ServiceAccountMissingReason = "ServiceAccountMissing"
)

// Server is how the controller reaches the API server of its own cluster:
// the local cluster's kubeconfig and the local agent use the same.
type Server struct {
	URL string
	CA  []byte
}

// ServerOf returns the address and CA of the API server cfg reaches: in a
// pod, the in-cluster address (KUBERNETES_SERVICE_HOST, no DNS needed) and
// the ServiceAccount CA. Only these are taken: never the controller's own
// credentials.
func ServerOf(cfg *rest.Config) (Server, error) {
	host := cfg.Host
	if u, err := url.Parse(host); err != nil || u.Scheme == "" || u.Host == "" {
		host = "https://" + host
	}
	if u, err := url.Parse(host); err != nil || u.Host == "" {
		return Server{}, fmt.Errorf("the controller's API server address %q is not a URL", cfg.Host)
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return Server{}, fmt.Errorf("reading the controller's API server CA: %w", err)
		}
		ca = b
	}
	return Server{URL: host, CA: ca}, nil
}

// Reconciler keeps the local cluster.
type Reconciler struct {
	// Shard is this replica's share; the shard owning the local Cluster's
	// key (<namespace>/local) bootstraps, the others do nothing.
	Shard  sharding.Shard
	Client client.Client
	// APIReader reads past the cache.
	APIReader client.Reader
	Config    *configstore.Store
	// Clientset serves the TokenRequest API.
	Clientset kubernetes.Interface
	Recorder  recorder.EventRecorder
	// Namespace is the controller's namespace, which holds the
	// ServiceAccount.
	Namespace string
	// Server is the controller's own API server.
	Server Server
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	objects *reconciler.Objects
}

// pass is what one reconcile works on and finds.
type pass struct {
	cfg *config.Config
	ns  string
	now time.Time

	sa *corev1.ServiceAccount
	// renewAt is when the token must be replaced.
	renewAt time.Time
}

func (r *Reconciler) phases() reconciler.Phases[*pass] {
	return reconciler.Phases[*pass]{
		// The identity first: without it nothing is made.
		{Name: "service-account", Run: r.readServiceAccount},
		{Name: "namespace", Run: r.ensureNamespace},
		{Name: "kubeconfig-secret", Run: r.ensureSecret},
		{Name: "cluster", Run: r.ensureCluster},
		{Name: "cluster-group", Run: r.ensureGroup},
	}
}

// Reconcile makes the local cluster's objects, when bootstrap is on.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	// Never on defaults: the ConfigMap may turn the bootstrap off.
	cfg, err := r.Config.Known(ctx)
	if errors.Is(err, configstore.ErrNotKnown) {
		log.Error(err, "not bootstrapping the local cluster until the controller configuration is valid")
		return ctrl.Result{}, nil // its change brings the pass back
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if !cfg.BootstrapEnabled() {
		log.V(1).Info("bootstrap is off: the local cluster is neither made nor deleted")
		return ctrl.Result{}, nil
	}
	ns := cfg.GetBootstrapNamespace()
	if !r.Shard.OwnsKey(ns + "/" + config.LocalClusterName) {
		return ctrl.Result{}, nil
	}
	p := &pass{cfg: cfg, ns: ns, now: reconciler.Clock(r.Now).Now()}
	out := reconciler.Success(fleet.SucceededReason, "")
	if err := r.phases().Run(ctx, p); err != nil {
		out = reconciler.Failure(err)
	}
	switch out.Kind() {
	case reconciler.KindRaced:
		log.V(1).Info("object changed meanwhile or not in the cache yet; retrying", "error", out.Err.Error())
	case reconciler.KindWaiting:
		w := out.Waiting()
		log.Info("local cluster is waiting", "reason", w.Reason, "message", w.Message)
	}
	var schedule time.Duration
	if !p.renewAt.IsZero() {
		schedule = max(p.renewAt.Sub(p.now), time.Second)
	}
	return out.Result(schedule)
}

// readServiceAccount finds the bootstrap identity. It is charts/fleet's to
// make (the controller cannot grant cluster-admin); without it the pass
// makes nothing and says what is missing.
func (r *Reconciler) readServiceAccount(ctx context.Context, p *pass) error {
	sa := &corev1.ServiceAccount{}
	key := client.ObjectKey{Namespace: r.Namespace, Name: ServiceAccountName}
	err := r.Client.Get(ctx, key, sa)
	if apierrors.IsNotFound(err) {
		return reconciler.Wait(ServiceAccountMissingReason, missingRetry,
			"ServiceAccount %s not found: install charts/fleet with bootstrap.enabled true, or set bootstrap.enabled false in the %s ConfigMap", key, config.ConfigMapName)
	}
	if err != nil {
		return fmt.Errorf("reading ServiceAccount %s: %w", key, err)
	}
	p.sa = sa
	return nil
}

// ensureNamespace makes the workspace when it is missing. A namespace that
// exists is used as it is, never labelled: it may be someone else's.
func (r *Reconciler) ensureNamespace(ctx context.Context, p *pass) error {
	ns := &corev1.Namespace{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: p.ns}, ns)
	switch {
	case err == nil:
		if !ns.DeletionTimestamp.IsZero() {
			return reconciler.Wait(fleet.WaitingReason, reconciler.ConflictRetry, "namespace %s is being deleted; the local cluster is made again after", p.ns)
		}
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading namespace %s: %w", p.ns, err)
	}
	_, err = r.ensure(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns}})
	return err
}

// ensureSecret makes the kubeconfig Secret: the controller's API server and
// CA, as the kubeconfig's server and as the agent's upstream (keys
// apiServerURL, apiServerCA, which win over the configuration's: the local
// agent needs no external address), and a token of the ServiceAccount,
// minted when there is none that is good for a while yet.
func (r *Reconciler) ensureSecret(ctx context.Context, p *pass) error {
	log := ctrl.LoggerFrom(ctx)
	key := client.ObjectKey{Namespace: p.ns, Name: SecretName}
	existing := &corev1.Secret{}
	// Secrets are not cached: this reads the API server.
	err := r.Client.Get(ctx, key, existing)
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", key, err)
	default:
		if err := (owner{}).Check(existing); err != nil {
			return err
		}
	}
	tok, ok := tokenOf(existing, p.sa)
	if !ok || !p.now.Before(tok.renewAt()) {
		tr, err := r.Clientset.CoreV1().ServiceAccounts(p.sa.Namespace).CreateToken(ctx, p.sa.Name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(TokenLifetime / time.Second))},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", p.sa.Namespace, p.sa.Name, err)
		}
		tok = token{bearer: tr.Status.Token, issued: p.now.Truncate(time.Second), expires: tr.Status.ExpirationTimestamp.Time.Truncate(time.Second), saUID: p.sa.UID}
		log.Info("minted the local cluster's token", "serviceAccount", p.sa.Namespace+"/"+p.sa.Name, "secret", key.String(), "tokenExpires", tok.expires.UTC().Format(time.RFC3339))
	}
	desired, err := secret(key, r.Server, tok)
	if err != nil {
		return err
	}
	if _, err := r.ensure(ctx, desired); err != nil {
		return err
	}
	p.renewAt = tok.renewAt()
	return nil
}

// ensureCluster makes Cluster local. Only the fields set here are kept:
// the clientID and finalizer the Cluster reconciler sets stay, and so do
// the agent settings a person adds.
func (r *Reconciler) ensureCluster(ctx context.Context, p *pass) error {
	c := &fleet.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: config.LocalClusterName, Labels: map[string]string{NameLabel: config.LocalClusterName}},
		Spec: fleet.ClusterSpec{
			KubeConfigSecret: SecretName,
			AgentNamespace:   p.cfg.GetBootstrapAgentNamespace(),
		},
	}
	action, err := r.ensure(ctx, c, reconciler.Shared())
	if err != nil {
		return err
	}
	if action == reconciler.Created {
		ctrl.LoggerFrom(ctx).Info("local cluster bootstrapped", "cluster", p.ns+"/"+c.Name, "agentNamespace", c.Spec.AgentNamespace)
		reconciler.Eventf(r.Recorder, c, nil, corev1.EventTypeNormal, BootstrappedReason, "Bootstrap",
			"the controller registered its own cluster (bootstrap.enabled): kubeconfig Secret %s, agent namespace %s", SecretName, c.Spec.AgentNamespace)
	}
	return nil
}

// ensureGroup makes ClusterGroup default selecting the local cluster, as
// Fleet does. A group of that name that someone else made is left alone:
// it is a convenience, not something the local cluster needs.
func (r *Reconciler) ensureGroup(ctx context.Context, p *pass) error {
	g := &fleet.ClusterGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: GroupName},
		Spec: fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{
			MatchLabels: map[string]string{NameLabel: config.LocalClusterName},
		}},
	}
	existing := &fleet.ClusterGroup{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(g), existing)
	switch {
	case err == nil && existing.Labels[Label] != "true":
		ctrl.LoggerFrom(ctx).V(1).Info("leaving a ClusterGroup the bootstrap did not make", "clusterGroup", p.ns+"/"+GroupName)
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading ClusterGroup %s/%s: %w", p.ns, GroupName, err)
	}
	_, err = r.ensure(ctx, g, reconciler.Shared())
	return err
}

func (r *Reconciler) ensure(ctx context.Context, obj client.Object, opts ...reconciler.EnsureOption) (reconciler.Action, error) {
	if r.objects == nil {
		r.objects = reconciler.NewObjects(r.Client, r.APIReader)
	}
	action, err := r.objects.Ensure(ctx, owner{}, obj, opts...)
	var w *reconciler.Waiting
	if errors.As(err, &w) && w.Reason == ObjectConflictReason && obj.GetNamespace() != "" {
		// Said once per pass on what is in the way, for whoever looks at it.
		existing := obj.DeepCopyObject().(client.Object)
		if r.Client.Get(ctx, client.ObjectKeyFromObject(obj), existing) == nil {
			reconciler.Eventf(r.Recorder, existing, nil, corev1.EventTypeWarning, ObjectConflictReason, "Bootstrap", "%s", w.Message)
		}
	}
	return action, err
}

// owner marks what the bootstrap makes (labels managed and bootstrap) and
// changes nothing else of that name.
type owner struct{}

// Own labels obj as the bootstrap's.
func (owner) Own(obj client.Object) error {
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[fleet.ManagedLabel] = "true"
	l[Label] = "true"
	obj.SetLabels(l)
	return nil
}

// Check accepts only an object the bootstrap made that is not going away.
func (owner) Check(obj client.Object) error {
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if !obj.GetDeletionTimestamp().IsZero() {
		// Its deletion brings the pass back.
		return reconciler.Wait(fleet.WaitingReason, 0, "%s is being deleted; it is made again after", key)
	}
	if obj.GetLabels()[Label] != "true" {
		return reconciler.Wait(ObjectConflictReason, reconciler.ConflictRetry,
			"%s exists and was not made by the controller's bootstrap (no label %s=true): the local cluster is not kept while it is there; delete it, or set bootstrap.enabled false", key, Label)
	}
	return nil
}
