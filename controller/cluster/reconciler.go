// Package cluster is the Cluster reconciler: per-cluster namespace, clientID,
// the agent's Bundle, the import of manager-initiated clusters (push the
// agent through the kubeconfig Secret) and the Cluster's conditions; on
// deletion it removes everything made for the cluster.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/clusterns"
	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/controller/remote"
	"github.com/gitops-fleet/fleet/controller/rollout"
	"github.com/gitops-fleet/fleet/controller/sharding"
	"github.com/gitops-fleet/fleet/controller/summary"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/renderer"
)

// Reconciler reconciles Clusters.
type Reconciler struct {
	// Shard is this replica's share of the Clusters (zero: all).
	Shard  sharding.Shard
	Client client.Client
	// Cache reads the metadata-only Secret informer (the client reads
	// Secrets from the API server).
	Cache client.Reader
	// APIReader reads from the API server, past the cache.
	APIReader client.Reader
	Config    *configstore.Store
	Renderer  *renderer.AgentRenderer
	// Remotes keeps a client per downstream cluster, keyed by its
	// kubeconfig: a cache, made again from the kubeconfig Secret when lost.
	Remotes  *remote.Cache
	Recorder recorder.EventRecorder
	// Gate stages agent changes that roll every agent (nil: none are).
	Gate *rollout.Gate
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// revMu guards the current agent revision, computed once per
	// configuration (the store hands out a new pointer on every change).
	revMu    sync.Mutex
	revCfg   *config.Config
	revValue string

	// objects keeps the agent Bundle (set up by SetupWithManager).
	objects *reconciler.Objects
	// memo spares heartbeat reconciles a read of the kubeconfig Secret.
	// Like Remotes it is a cache, safe to lose (see importMemo): every
	// decision of a pass is made on what it reads from the API.
	memo importMemo
	// deploys keeps the last deploy per Cluster until its status says so.
	deploys deployMemo
}

// pass is what one reconcile of a Cluster works on and finds.
type pass struct {
	cluster *fleet.Cluster
	cfg     *config.Config
	now     time.Time
	// bundles summarises the cluster's BundleDeployments.
	bundles fleet.BundleSummary
	// imported is set when the import phase ran.
	imported bool
	// rollout is what the agent is rendered from (set by the agent-bundle
	// phase when it ran).
	rollout rollout.Source
	// kubeconfig is the kubeconfig Secret as read and checked by the
	// import-token phase, when it ran and the Secret passed.
	kubeconfig *kubeconfigInput
	// importTokenMade is set when that phase created the import token.
	importTokenMade bool
}

// phases bring a Cluster to its desired state, in order; the first that
// fails ends the pass and decides Ready.
func (r *Reconciler) phases() reconciler.Phases[*pass] {
	return reconciler.Phases[*pass]{
		{Name: "import-token", Run: r.startImportToken, Skip: func(p *pass) bool { return !deployPending(p.cluster) }},
		{Name: "namespace", Run: r.ensureNamespace},
		{Name: "recovery-identity", Run: r.ensureRecoveryIdentity, Skip: func(p *pass) bool {
			return p.cluster.Annotations[fleet.AgentIdentityKeyAnnotation] == ""
		}},
		{Name: "agent-bundle", Run: r.reconcileAgentBundle},
		{Name: "bundle-summary", Run: r.summarizeBundles},
		{Name: "import", Run: r.reconcileImport, Skip: func(p *pass) bool { return p.cluster.Spec.KubeConfigSecret == "" }},
	}
}

// Reconcile brings one Cluster to its desired state.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &fleet.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !r.owns(cluster) {
		return ctrl.Result{}, nil
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, cluster)
	}
	// The finalizer, a generated clientID and the agent's identity key
	// reported by an agent registered before keys existed go in one write.
	addedFinalizer := controllerutil.AddFinalizer(cluster, fleet.ClusterFinalizer)
	generatedID, err := ensureClientID(cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	recordedKey, err := r.recordReportedKey(ctx, cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	if addedFinalizer || generatedID || recordedKey {
		if err := r.Client.Update(ctx, cluster, client.FieldOwner(reconciler.FieldManager)); err != nil {
			return ctrl.Result{}, fmt.Errorf("updating cluster %s: %w", req.NamespacedName, err)
		}
	}
	if !r.owns(cluster) {
		// The new clientID hands the Cluster to another shard.
		return ctrl.Result{}, nil
	}

	// An agent-initiated Cluster the grant just made: its agent checks in
	// within moments, and the first status worth writing is the one that
	// sees it. Writing one before (namespace, "waiting for the agent")
	// would be a write per registration more, and the namespace create
	// would race the grant's.
	if wait := firstCheckInGrace(cluster, reconciler.Clock(r.Now).Now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}

	// The status is patched once, at the end, from what this pass observed.
	patcher, err := reconciler.NewStatusPatcher(r.Client, cluster, OwnedConditions...)
	if err != nil {
		return ctrl.Result{}, err
	}
	readyBefore := meta.FindStatusCondition(cluster.Status.Conditions, fleet.ReadyCondition).DeepCopy()
	directBefore := meta.FindStatusCondition(cluster.Status.Conditions, fleet.DirectEndpointCondition).DeepCopy()
	cfg := r.Config.Get()
	p := &pass{cluster: cluster, cfg: cfg, now: reconciler.Clock(r.Now).Now()}
	err = r.phases().Run(ctx, p)
	o := observation{now: p.now, offlineAfter: cfg.OfflineAfter(), bundles: p.bundles, imported: p.imported, rollout: p.rollout, err: err}
	out := computeConditions(cluster, o)
	if err := patcher.Patch(ctx, cluster); err != nil {
		// Another writer (the agent's heartbeat, fleet-proxy's Connected)
		// may have written the status meanwhile: retried at once, not
		// after this controller's backoff of a second.
		return reconciler.StatusPatchFailed(ctx, err, out.Err)
	}
	r.report(ctx, cluster, readyBefore, out)
	r.reportDirectEndpoint(cluster, directBefore)
	return out.Result(heartbeatSchedule(cluster, o))
}

// report logs a pass that raced, and records the event a wait asks for
// once, when Ready changes to it.
func (r *Reconciler) report(ctx context.Context, cluster *fleet.Cluster, readyBefore *metav1.Condition, out reconciler.Outcome) {
	switch out.Kind() {
	case reconciler.KindRaced:
		ctrl.LoggerFrom(ctx).V(1).Info("object changed meanwhile or not in the cache yet; retrying", "error", out.Err.Error())
	case reconciler.KindWaiting:
		w := out.Waiting()
		if w.Event != "" && (readyBefore == nil || readyBefore.Reason != w.Reason || readyBefore.Message != w.Message) {
			reconciler.Eventf(r.Recorder, cluster, nil, w.Event, w.Reason, "Reconcile", "%s", w.Message)
		}
	}
}

// reportDirectEndpoint records a Warning event when the direct endpoint's
// certificate stops covering the url's host (or covers another host no
// more), once: not on every heartbeat.
func (r *Reconciler) reportDirectEndpoint(cluster *fleet.Cluster, before *metav1.Condition) {
	now := meta.FindStatusCondition(cluster.Status.Conditions, fleet.DirectEndpointCondition)
	if now == nil || (before != nil && before.Message == now.Message) {
		return
	}
	reconciler.Eventf(r.Recorder, cluster, nil, corev1.EventTypeWarning, now.Reason, "Reconcile", "%s", now.Message)
}

func (r *Reconciler) owns(c *fleet.Cluster) bool {
	return r.Shard.OwnsCluster(c.Namespace, c.Name, c.Spec.ClientID, c.Labels)
}

// FirstCheckInGrace is how long a new agent-initiated Cluster's status is
// left unwritten while its agent makes its first check-in.
const FirstCheckInGrace = 20 * time.Second

// firstCheckInGrace returns how much longer the first status write of
// cluster waits for its agent's first check-in (zero: write now). Only a
// Cluster that has no status of this reconciler's or its agent's, no
// kubeconfig Secret (the agent registers itself) and is younger than
// FirstCheckInGrace waits. fleet-proxy's Connected does not end the wait:
// the agent opens its tunnel as soon as it is granted, often just before
// its first check-in.
func firstCheckInGrace(cluster *fleet.Cluster, now time.Time) time.Duration {
	if cluster.Spec.KubeConfigSecret != "" || !cluster.Status.Agent.LastSeen.IsZero() ||
		slices.ContainsFunc(cluster.Status.Conditions, func(c metav1.Condition) bool { return c.Type != fleet.ConnectedCondition }) ||
		cluster.Status.Namespace != "" {
		return 0
	}
	return max(0, cluster.CreationTimestamp.Add(FirstCheckInGrace).Sub(now))
}

// ensureClientID gives a manager-initiated Cluster a random clientID, as
// Fleet does; the agent registers with it. It reports whether it set one.
func ensureClientID(cluster *fleet.Cluster) (bool, error) {
	if cluster.Spec.ClientID != "" || cluster.Spec.KubeConfigSecret == "" {
		return false, nil
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return false, err
	}
	cluster.Spec.ClientID = hex.EncodeToString(b)
	return true, nil
}

// ensureNamespace makes the per-cluster namespace that holds the cluster's
// BundleDeployments and request identity (by the rule the registration
// reconciler, which may make it first, follows too), and records its name
// in the status once it exists.
func (r *Reconciler) ensureNamespace(ctx context.Context, p *pass) error {
	c := p.cluster
	if err := clusterns.Ensure(ctx, r.Client, r.APIReader, names.NewClusterNamespace(c.Namespace, c.Name)); err != nil {
		return err
	}
	c.Status.Namespace = names.ClusterNamespace(c.Namespace, c.Name)
	return nil
}

// summarizeBundles aggregates the cluster's BundleDeployments into its
// status (the BUNDLES-READY column).
func (r *Reconciler) summarizeBundles(ctx context.Context, p *pass) error {
	cluster := p.cluster
	ns := names.ClusterNamespace(cluster.Namespace, cluster.Name)
	list := &fleet.BundleDeploymentList{}
	if err := r.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("listing the BundleDeployments in %s: %w", ns, err)
	}
	p.bundles = summary.Summarize(list.Items)
	cluster.Status.Summary = p.bundles
	cluster.Status.Display.ReadyBundles = fmt.Sprintf("%d/%d", p.bundles.Ready, p.bundles.DesiredReady)
	a := cluster.Status.Agent
	if a.NodeCount > 0 {
		cluster.Status.Display.ReadyNodes = fmt.Sprintf("%d/%d", a.ReadyNodeCount, a.NodeCount)
		cluster.Status.Display.SampleNode = a.SampleNode
	}
	return nil
}

// reconcileDelete removes everything made for the cluster upstream (and, for
// a manager-initiated cluster that is still reachable, the agent
// downstream), then lets the Cluster go.
func (r *Reconciler) reconcileDelete(ctx context.Context, cluster *fleet.Cluster) error {
	if !controllerutil.ContainsFinalizer(cluster, fleet.ClusterFinalizer) {
		return nil
	}
	log := ctrl.LoggerFrom(ctx)
	if cluster.Spec.KubeConfigSecret != "" && cluster.Status.AgentDeployedGeneration != nil {
		if err := r.removeAgentDownstream(ctx, cluster); err != nil {
			// The Cluster is going whether or not its cluster answers.
			log.Error(err, "could not remove the agent downstream; leaving it")
			reconciler.Eventf(r.Recorder, cluster, nil, corev1.EventTypeWarning, "AgentNotRemoved", "Delete", "the agent could not be removed from the downstream cluster: %v", err)
		}
	}
	r.Remotes.Forget(client.ObjectKeyFromObject(cluster))
	r.memo.forget(client.ObjectKeyFromObject(cluster))
	r.deploys.forget(client.ObjectKeyFromObject(cluster))

	var errs []error
	del := func(o client.Object) {
		if err := r.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	del(&fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: names.AgentBundle(cluster.Name)}})
	del(&fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: names.ImportToken(cluster.Name)}})
	// The recovery identity's binding (its ServiceAccount goes with the
	// cluster namespace).
	del(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: registration.RecoveryBindingName(cluster.Name)}})
	regs := &fleet.ClusterRegistrationList{}
	if err := r.Client.List(ctx, regs, client.InNamespace(cluster.Namespace)); err != nil {
		errs = append(errs, err)
	}
	for i := range regs.Items {
		reg := &regs.Items[i]
		if reg.Status.ClusterName == cluster.Name || (cluster.Spec.ClientID != "" && reg.Spec.ClientID == cluster.Spec.ClientID) {
			del(reg)
		}
	}
	del(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names.ClusterNamespace(cluster.Namespace, cluster.Name)}})
	if len(errs) > 0 {
		return fmt.Errorf("cleaning up after cluster %s/%s: %w", cluster.Namespace, cluster.Name, errors.Join(errs...))
	}
	controllerutil.RemoveFinalizer(cluster, fleet.ClusterFinalizer)
	if err := r.Client.Update(ctx, cluster, client.FieldOwner(reconciler.FieldManager)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing the finalizer of cluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	log.Info("cluster deleted; its namespace, agent Bundle, import token, recovery identity and registrations were removed")
	return nil
}
