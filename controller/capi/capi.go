// Package capi registers Cluster API clusters with fleet. For every
// cluster.x-k8s.io Cluster the operator opted in (fleet-controller ConfigMap
// keys capiNamespaces and capiClusterSelector) whose <name>-kubeconfig Secret
// exists, it keeps a fleet Cluster of the same name and namespace that uses
// that Secret, carries the CAPI cluster's labels and is owned by it, so the
// garbage collector removes it with the CAPI cluster. From there the Cluster
// reconciler imports it like any manager-initiated cluster. CAPI clusters are
// watched only once their API is served (see watcher.go).
package capi

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/controller/sharding"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

const (
	// Group and Kind of Cluster API clusters.
	Group = "cluster.x-k8s.io"
	Kind  = "Cluster"
	// PreferredVersion is watched when served; otherwise the group's
	// preferred version is. Only metadata is read, which every version has.
	PreferredVersion = "v1beta1"
	// KubeconfigSuffix names a CAPI cluster's kubeconfig Secret:
	// <cluster>-kubeconfig, key "value".
	KubeconfigSuffix = "-kubeconfig"
)

// Reasons of the events on CAPI clusters.
const (
	RegisteredReason      = "FleetClusterCreated"
	NameTakenReason       = "FleetClusterNameTaken"
	NotCreatedReason      = "FleetClusterNotCreated"
	DeregisteredReason    = "FleetClusterDeleted"
	eventActionRegister   = "Register"
	eventActionDeregister = "Deregister"
)

// Reconciler keeps one fleet Cluster per opted-in CAPI cluster. Requests
// are keyed by the shared namespace/name. It writes fleet Clusters under
// reconciler.FieldManager, and keeps nothing in memory but the served CAPI
// version (found by discovery at every start): whose a fleet Cluster is, and
// which labels it copied, are read from the Cluster itself (its
// fleet.CAPIClusterLabel, owner reference and fleet.CAPILabelsAnnotation).
type Reconciler struct {
	// Shard is this replica's share (by namespace/name of the CAPI cluster).
	Shard sharding.Shard
	// Client writes fleet Clusters (under reconciler.FieldManager).
	Client client.Client
	// Cache reads CAPI cluster and Secret metadata and fleet Clusters.
	Cache    client.Reader
	Config   *configstore.Store
	Recorder recorder.EventRecorder

	// gvk is the served CAPI Cluster version, set when the watch starts.
	gvk schema.GroupVersionKind
}

func (r *Reconciler) newCAPICluster() *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(r.gvk)
	return o
}

// Reconcile creates, updates or deletes the fleet Cluster of one CAPI
// cluster.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !r.Shard.OwnsKey(req.Namespace + "/" + req.Name) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	capi := r.newCAPICluster()
	capiGone := false
	if err := r.Cache.Get(ctx, req.NamespacedName, capi); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		capiGone = true
	}
	// Reads may drop the type; events need it.
	capi.SetGroupVersionKind(r.gvk)
	fc := &fleet.Cluster{}
	fcFound := true
	if err := r.Cache.Get(ctx, req.NamespacedName, fc); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		fcFound = false
	}
	ours := fcFound && fc.Labels[fleet.CAPIClusterLabel] == req.Name

	// The garbage collector removes our Cluster once the CAPI cluster is
	// gone; deleting it as soon as the CAPI cluster is being deleted lets
	// the agent be removed while the downstream still answers, and covers
	// Clusters whose owner reference was lost.
	if capiGone || !capi.DeletionTimestamp.IsZero() {
		if !ours || !fc.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, nil
		}
		if err := r.deleteCluster(ctx, fc); err != nil {
			return ctrl.Result{}, err
		}
		log.Info("CAPI cluster deleted; deleting its fleet Cluster")
		if !capiGone {
			reconciler.Eventf(r.Recorder, capi, nil, corev1.EventTypeNormal, DeregisteredReason, eventActionDeregister,
				"fleet Cluster %s deleted with this cluster", req.NamespacedName)
		}
		return ctrl.Result{}, nil
	}

	cfg := r.Config.Get()
	selected := cfg.CAPISelects(capi.Namespace, capi.Labels)
	switch {
	case fcFound && !ours:
		if selected {
			reconciler.Eventf(r.Recorder, capi, nil, corev1.EventTypeWarning, NameTakenReason, eventActionRegister,
				"fleet Cluster %s already exists and was not made by Cluster API auto-registration (no label %s); it is left as it is. Delete or rename it to let this cluster register.",
				req.NamespacedName, fleet.CAPIClusterLabel)
		}
		return ctrl.Result{}, nil
	case ours && !fc.DeletionTimestamp.IsZero():
		// Its delete event brings this request back once it is gone.
		return ctrl.Result{}, nil
	case ours && ownerUID(fc, r.gvk) != "" && ownerUID(fc, r.gvk) != capi.UID:
		// Made for an earlier CAPI cluster of the same name (the garbage
		// collector would delete it too): it goes, and this one gets a
		// Cluster of its own once it has.
		log.Info("fleet Cluster belongs to an earlier CAPI cluster of the same name; deleting it")
		return ctrl.Result{}, r.deleteCluster(ctx, fc)
	case ours && !selected:
		// Opting out stops label updates but deletes nothing: a ConfigMap
		// not yet read (or a mistaken edit) must not unregister clusters.
		log.V(1).Info("CAPI cluster no longer opted in; its fleet Cluster is kept")
		return ctrl.Result{}, nil
	case ours:
		return ctrl.Result{}, r.update(ctx, capi, fc)
	case !selected:
		return ctrl.Result{}, nil
	}

	secret := &metav1.PartialObjectMetadata{}
	secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	secretKey := types.NamespacedName{Namespace: req.Namespace, Name: req.Name + KubeconfigSuffix}
	if err := r.Cache.Get(ctx, secretKey, secret); err != nil {
		if apierrors.IsNotFound(err) {
			// CAPI writes it once the control plane is up; its create event
			// brings this request back.
			log.V(1).Info("waiting for the CAPI kubeconfig Secret", "secret", secretKey.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	return r.create(ctx, capi)
}

func (r *Reconciler) create(ctx context.Context, capi *metav1.PartialObjectMetadata) (ctrl.Result, error) {
	copied := copyableLabels(capi.Labels)
	fc := &fleet.Cluster{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       capi.Namespace,
			Name:            capi.Name,
			Labels:          withMarker(copied, capi.Name),
			Annotations:     map[string]string{fleet.CAPILabelsAnnotation: labelKeys(copied)},
			OwnerReferences: []metav1.OwnerReference{ownerRef(capi, r.gvk)},
		},
		Spec: fleet.ClusterSpec{KubeConfigSecret: capi.Name + KubeconfigSuffix},
	}
	if err := r.Client.Create(ctx, fc, client.FieldOwner(reconciler.FieldManager)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Made meanwhile (by hand?): look again once the cache has it.
			return reconciler.Failure(err).Result(0)
		}
		// Say why on the CAPI cluster (an admission policy, a quota...);
		// the API server's message holds no secret.
		reconciler.Eventf(r.Recorder, capi, nil, corev1.EventTypeWarning, NotCreatedReason, eventActionRegister,
			"fleet Cluster %s/%s could not be created: %v", fc.Namespace, fc.Name, err)
		return ctrl.Result{}, fmt.Errorf("creating fleet Cluster %s/%s: %w", fc.Namespace, fc.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("fleet Cluster created for CAPI cluster", "kubeConfigSecret", fc.Spec.KubeConfigSecret)
	reconciler.Eventf(r.Recorder, capi, nil, corev1.EventTypeNormal, RegisteredReason, eventActionRegister,
		"fleet Cluster %s/%s created; it uses kubeconfig Secret %s", fc.Namespace, fc.Name, fc.Spec.KubeConfigSecret)
	return ctrl.Result{}, nil
}

// update makes our Cluster follow the CAPI cluster's labels. Labels added to
// the fleet Cluster by others stay: only the keys copied before (recorded in
// an annotation) are removed when they leave the CAPI cluster.
func (r *Reconciler) update(ctx context.Context, capi *metav1.PartialObjectMetadata, fc *fleet.Cluster) error {
	orig := fc.DeepCopy()
	copied := copyableLabels(capi.Labels)
	if fc.Labels == nil {
		fc.Labels = map[string]string{}
	}
	for _, k := range strings.Split(fc.Annotations[fleet.CAPILabelsAnnotation], ",") {
		if _, still := copied[k]; !still && k != fleet.CAPIClusterLabel {
			delete(fc.Labels, k)
		}
	}
	maps.Copy(fc.Labels, copied)
	if fc.Annotations == nil {
		fc.Annotations = map[string]string{}
	}
	fc.Annotations[fleet.CAPILabelsAnnotation] = labelKeys(copied)
	fc.Spec.KubeConfigSecret = capi.Name + KubeconfigSuffix
	fc.Spec.KubeConfigSecretNamespace = ""
	ownerMissing := ownerUID(fc, r.gvk) == ""
	if ownerMissing {
		ref := ownerRef(capi, r.gvk)
		if metav1.GetControllerOf(fc) != nil {
			ref.Controller = nil // an object has at most one controller
		}
		fc.OwnerReferences = append(fc.OwnerReferences, ref)
	}
	if !ownerMissing && maps.Equal(orig.Labels, fc.Labels) && maps.Equal(orig.Annotations, fc.Annotations) &&
		orig.Spec.KubeConfigSecret == fc.Spec.KubeConfigSecret && orig.Spec.KubeConfigSecretNamespace == "" {
		return nil
	}
	if err := r.Client.Patch(ctx, fc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(reconciler.FieldManager)); err != nil {
		return fmt.Errorf("updating fleet Cluster %s/%s: %w", fc.Namespace, fc.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("fleet Cluster follows the CAPI cluster's labels")
	return nil
}

// deleteCluster deletes exactly this Cluster (not a newer one of the same
// name); the Cluster reconciler's finalizer cleans up upstream and
// downstream.
func (r *Reconciler) deleteCluster(ctx context.Context, fc *fleet.Cluster) error {
	err := r.Client.Delete(ctx, fc, client.Preconditions{UID: ptr.To(fc.UID)})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting fleet Cluster %s/%s: %w", fc.Namespace, fc.Name, err)
	}
	return nil
}

// copyableLabels are the CAPI cluster's labels minus reserved ones (fleet's
// own, which would let a CAPI cluster forge the auto-registration mark or
// pick a shard).
func copyableLabels(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		if !slices.ContainsFunc(fleet.ReservedLabelPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			out[k] = v
		}
	}
	return out
}

func withMarker(labels map[string]string, name string) map[string]string {
	out := maps.Clone(labels)
	out[fleet.CAPIClusterLabel] = name
	return out
}

func labelKeys(labels map[string]string) string {
	return strings.Join(slices.Sorted(maps.Keys(labels)), ",")
}

func ownerRef(capi *metav1.PartialObjectMetadata, gvk schema.GroupVersionKind) metav1.OwnerReference {
	// No blockOwnerDeletion: it would need update rights on
	// clusters/finalizers of cluster.x-k8s.io where that is enforced.
	return metav1.OwnerReference{
		APIVersion: gvk.GroupVersion().String(),
		Kind:       gvk.Kind,
		Name:       capi.Name,
		UID:        capi.UID,
		Controller: ptr.To(true),
	}
}

// ownerUID is the UID of the CAPI cluster that owns the fleet Cluster.
func ownerUID(fc *fleet.Cluster, gvk schema.GroupVersionKind) types.UID {
	for _, o := range fc.OwnerReferences {
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err == nil && gv.Group == gvk.Group && o.Kind == gvk.Kind {
			return o.UID
		}
	}
	return ""
}
