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
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/controller/remote"
	"github.com/gitops-fleet/fleet/controller/sharding"
	"github.com/gitops-fleet/fleet/controller/summary"
	"github.com/gitops-fleet/fleet/internal/names"
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
	Remotes   *remote.Cache
	Recorder  recorder.EventRecorder
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	memo importMemo
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile brings one Cluster to its desired state.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	cluster := &fleet.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !r.owns(cluster) {
		return ctrl.Result{}, nil
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, cluster)
	}
	// The finalizer and a generated clientID go in one write.
	addedFinalizer := controllerutil.AddFinalizer(cluster, fleet.ClusterFinalizer)
	generatedID, err := ensureClientID(cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	if addedFinalizer || generatedID {
		if err := r.Client.Update(ctx, cluster); err != nil {
			return ctrl.Result{}, fmt.Errorf("updating cluster %s: %w", req.NamespacedName, err)
		}
	}
	if !r.owns(cluster) {
		// The new clientID hands the Cluster to another shard.
		return ctrl.Result{}, nil
	}

	orig := cluster.DeepCopy()
	// The status is patched once, at the end, from what this pass observed.
	defer func() {
		if equalStatus(orig, cluster) {
			return
		}
		if err := r.Client.Status().Patch(ctx, cluster, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
			retErr = kerrors.NewAggregate([]error{retErr, fmt.Errorf("patching status of cluster %s: %w", req.NamespacedName, err)})
		}
	}()

	cfg := r.Config.Get()
	o := outcome{now: r.now(), offlineAfter: cfg.OfflineAfter()}
	defer func() {
		computeConditions(cluster, o)
		result = requeueForHeartbeat(result, cluster, o)
	}()

	if step := r.ensureNamespace(ctx, cluster); step != nil {
		o.failure = step
		if step.stalled {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, errors.New(step.message)
	}
	if err := r.reconcileAgentBundle(ctx, cluster); err != nil {
		var inErr *inputError
		if errors.As(err, &inErr) {
			o.failure = stalled(inErr.reason, "%s", inErr.msg)
			return ctrl.Result{}, nil
		}
		o.failure = waiting(fleet.ProgressingReason, "writing the agent Bundle failed: %v", err)
		return ctrl.Result{}, err
	}
	if err := r.summarizeBundles(ctx, cluster, &o); err != nil {
		return ctrl.Result{}, err
	}
	if cluster.Spec.KubeConfigSecret != "" {
		res, step, err := r.reconcileImport(ctx, cluster)
		o.imported = step
		return res, err
	}
	return ctrl.Result{}, nil
}

func (r *Reconciler) owns(c *fleet.Cluster) bool {
	return r.Shard.OwnsCluster(c.Namespace, c.Name, c.Spec.ClientID, c.Labels)
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
// BundleDeployments and request identity, and records its name in the
// status once it exists. A namespace of that name made for another Cluster
// (names are shortened with a hash, so two Clusters could be given the same
// one) is never shared: that is a conflict the user must resolve.
func (r *Reconciler) ensureNamespace(ctx context.Context, cluster *fleet.Cluster) *stepResult {
	name := names.ClusterNamespace(cluster.Namespace, cluster.Name)
	ns := &corev1.Namespace{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: name}, ns)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		// The registration controller may have just made it: ask the API
		// server (a read) before a create that would fail (a write).
		err = r.APIReader.Get(ctx, client.ObjectKey{Name: name}, ns)
	}
	switch {
	case err == nil && !names.NamespaceIsFor(ns, cluster.Namespace, cluster.Name):
		return stalled(fleet.NamespaceConflictReason,
			"the cluster namespace %s exists and was not made for this Cluster (its labels name %s/%s): delete or rename whichever of the two is wrong",
			name, ns.Labels[fleet.ClusterNamespaceLabel], ns.Labels[fleet.ClusterLabel])
	case err == nil && !ns.DeletionTimestamp.IsZero():
		return waiting(fleet.ProgressingReason, "the cluster namespace %s is still being deleted", name)
	case err == nil:
		cluster.Status.Namespace = name
		return nil
	case !apierrors.IsNotFound(err):
		return waiting(fleet.ProgressingReason, "reading the cluster namespace %s: %v", name, err)
	}
	if err := r.Client.Create(ctx, names.NewClusterNamespace(cluster.Namespace, cluster.Name)); err != nil {
		// AlreadyExists: made meanwhile; the next pass checks whose it is.
		return waiting(fleet.ProgressingReason, "creating the cluster namespace %s failed: %v", name, err)
	}
	cluster.Status.Namespace = name
	return nil
}

// reconcileDelete removes everything made for the cluster upstream (and, for
// a manager-initiated cluster that is still reachable, the agent
// downstream), then lets the Cluster go.
func (r *Reconciler) reconcileDelete(ctx context.Context, cluster *fleet.Cluster) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(cluster, fleet.ClusterFinalizer) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	if cluster.Spec.KubeConfigSecret != "" && cluster.Status.AgentDeployedGeneration != nil {
		if err := r.removeAgentDownstream(ctx, cluster); err != nil {
			// The Cluster is going whether or not its cluster answers.
			log.Info("could not remove the agent downstream; leaving it", "error", err.Error())
			r.Recorder.Eventf(cluster, nil, corev1.EventTypeWarning, "AgentNotRemoved", "Delete", "the agent could not be removed from the downstream cluster: %v", err)
		}
	}
	r.Remotes.Forget(client.ObjectKeyFromObject(cluster))
	r.memo.forget(client.ObjectKeyFromObject(cluster))

	var errs []error
	del := func(o client.Object) {
		if err := r.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	del(&fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: names.AgentBundle(cluster.Name)}})
	del(&fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: names.ImportToken(cluster.Name)}})
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
		return ctrl.Result{}, fmt.Errorf("cleaning up after cluster %s/%s: %w", cluster.Namespace, cluster.Name, errors.Join(errs...))
	}
	controllerutil.RemoveFinalizer(cluster, fleet.ClusterFinalizer)
	if err := r.Client.Update(ctx, cluster); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	log.Info("cluster deleted; its namespace, agent Bundle, import token and registrations were removed")
	return ctrl.Result{}, nil
}

// equalStatus reports whether a reconcile left the status as it found it,
// ignoring condition timestamps that SetStatusCondition keeps stable anyway.
func equalStatus(a, b *fleet.Cluster) bool {
	return statusEqual(a.Status, b.Status)
}

// summarizeBundles aggregates the cluster's BundleDeployments into its
// status (the BUNDLES-READY column) and the outcome.
func (r *Reconciler) summarizeBundles(ctx context.Context, cluster *fleet.Cluster, o *outcome) error {
	list := &fleet.BundleDeploymentList{}
	if err := r.Client.List(ctx, list, client.InNamespace(names.ClusterNamespace(cluster.Namespace, cluster.Name))); err != nil {
		return err
	}
	o.bundles = summary.Summarize(list.Items)
	cluster.Status.Summary = o.bundles
	cluster.Status.Display.ReadyBundles = fmt.Sprintf("%d/%d", o.bundles.Ready, o.bundles.DesiredReady)
	a := cluster.Status.Agent
	if a.NodeCount > 0 {
		cluster.Status.Display.ReadyNodes = fmt.Sprintf("%d/%d", a.ReadyNodeCount, a.NodeCount)
		cluster.Status.Display.SampleNode = a.SampleNode
	}
	return nil
}
