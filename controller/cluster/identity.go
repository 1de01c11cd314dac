package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// The agent's identity key on its Cluster (docs/architecture.md "The
// handshake"): the grant records it (annotation
// fleet.AgentIdentityKeyAnnotation) when it creates the Cluster or grants a
// registration signed with another key. For a Cluster registered before
// agents had a key, the key is recorded from the heartbeat of its agent once
// it runs this release: only the cluster's live request identity (its
// owner) writes status.agent. Once a key is recorded, the Cluster gets its
// recovery identity.

// recordReportedKey sets the identity key annotation in memory (the caller
// writes it with the finalizer, in one update) when the key the agent
// reports is to be recorded, and reports whether it set it.
func (r *Reconciler) recordReportedKey(ctx context.Context, c *fleet.Cluster) (bool, error) {
	reported := c.Status.Agent.IdentityPublicKey
	recorded := c.Annotations[fleet.AgentIdentityKeyAnnotation]
	// The common case, a heartbeat of the recorded key, reads nothing.
	if reported == "" || registration.SameIdentityKey(reported, recorded) {
		return false, nil
	}
	newest, err := r.newestGrantedRegistration(ctx, c)
	if err != nil {
		return false, err
	}
	key := identityKeyToRecord(recorded, reported, newest)
	if key == "" {
		return false, nil
	}
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[fleet.AgentIdentityKeyAnnotation] = key
	ctrl.LoggerFrom(ctx).Info("recording the agent's identity key on the Cluster", "key", registration.IdentityFingerprint(key), "reportedByTheAgent", key == reported)
	return true, nil
}

// identityKeyToRecord decides which key the Cluster records, given the key
// recorded, the key its agent reports in its heartbeat, and the newest
// granted registration of the Cluster (nil: none); "" means leave it. A
// signed registration's grant decided the key: the heartbeat may still be
// the previous agent's (its credential outlives the grant by moments, and
// the new agent has not checked in yet), so then only that registration's
// key counts (recorded again if it was lost). Otherwise (registered before
// agents had a key, or by an admin's unsigned registration) the live
// agent's report counts.
func identityKeyToRecord(recorded, reported string, newest *fleet.ClusterRegistration) string {
	if newest != nil && registration.Signed(newest) {
		if registration.SameIdentityKey(newest.Spec.IdentityPublicKey, recorded) {
			return ""
		}
		if _, err := registration.ParseIdentityPublicKey(newest.Spec.IdentityPublicKey); err != nil {
			return ""
		}
		return newest.Spec.IdentityPublicKey
	}
	if _, err := registration.ParseIdentityPublicKey(reported); err != nil || registration.SameIdentityKey(reported, recorded) {
		return ""
	}
	return reported
}

// newestGrantedRegistration is the newest granted registration of c's
// clientID (read from the cache), nil if there is none.
func (r *Reconciler) newestGrantedRegistration(ctx context.Context, c *fleet.Cluster) (*fleet.ClusterRegistration, error) {
	if c.Spec.ClientID == "" {
		return nil, nil
	}
	list := &fleet.ClusterRegistrationList{}
	if err := r.Client.List(ctx, list, client.InNamespace(c.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the ClusterRegistrations of cluster %s/%s: %w", c.Namespace, c.Name, err)
	}
	var newest *fleet.ClusterRegistration
	for i := range list.Items {
		reg := &list.Items[i]
		if reg.Spec.ClientID != c.Spec.ClientID || !reg.Status.Granted || !reg.DeletionTimestamp.IsZero() {
			continue
		}
		if newest == nil || newer(reg, newest) {
			newest = reg
		}
	}
	return newest, nil
}

// newer orders registrations of one cluster: by creation, then by the
// agent's request time (creation has one-second resolution).
func newer(a, b *fleet.ClusterRegistration) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	ta, errA := time.Parse(time.RFC3339Nano, a.Annotations[registration.RequestedAtAnnotation])
	tb, errB := time.Parse(time.RFC3339Nano, b.Annotations[registration.RequestedAtAnnotation])
	return errA == nil && errB == nil && ta.After(tb)
}

// ensureRecoveryIdentity makes the Cluster's recovery identity once it has a
// recorded key: ServiceAccount fleet-agent-recovery in the cluster
// namespace (gone with it), and a RoleBinding in the workspace to the
// shared ClusterRole fleet-recovery-identity (controlled by the Cluster,
// and deleted with it). The agent mints a long-lived token of it to
// register again by itself; the grant lets it register only this Cluster,
// signed with the recorded key. Both are checked in the cache first, so a
// Cluster that has them costs no request.
func (r *Reconciler) ensureRecoveryIdentity(ctx context.Context, p *pass) error {
	c := p.cluster
	clusterNS := names.ClusterNamespace(c.Namespace, c.Name)
	sa := &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Namespace: clusterNS, Name: registration.RecoveryServiceAccountName},
		AutomountServiceAccountToken: ptr.To(false),
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: registration.RecoveryBindingName(c.Name)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: registration.RecoveryIdentityClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: clusterNS, Name: registration.RecoveryServiceAccountName}},
	}
	owner := recoveryOwner{cluster: c, scheme: r.Client.Scheme()}
	if r.objects == nil {
		r.objects = reconciler.NewObjects(r.Client, r.APIReader)
	}
	for _, obj := range []client.Object{sa, rb} {
		if current, err := r.recoveryObjectCurrent(ctx, owner, obj); err != nil || current {
			if err != nil {
				return err
			}
			continue
		}
		if _, err := r.objects.Ensure(ctx, owner, obj); err != nil {
			return err
		}
	}
	return nil
}

// recoveryObjectCurrent says whether the cache holds obj as desired, made
// for this Cluster.
func (r *Reconciler) recoveryObjectCurrent(ctx context.Context, owner recoveryOwner, desired client.Object) (bool, error) {
	var got client.Object = &corev1.ServiceAccount{}
	if _, ok := desired.(*rbacv1.RoleBinding); ok {
		got = &rbacv1.RoleBinding{}
	}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(desired), got); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading %s/%s: %w", desired.GetNamespace(), desired.GetName(), err)
	}
	if owner.Check(got) != nil || !got.GetDeletionTimestamp().IsZero() {
		// Ensure reports whose it is, or waits for its deletion.
		return false, nil
	}
	switch g := got.(type) {
	case *corev1.ServiceAccount:
		return ptr.Deref(g.AutomountServiceAccountToken, true) == false, nil
	case *rbacv1.RoleBinding:
		d := desired.(*rbacv1.RoleBinding)
		return g.RoleRef == d.RoleRef && len(g.Subjects) == 1 && g.Subjects[0] == d.Subjects[0], nil
	}
	return false, nil
}

// recoveryOwner makes and recognises a Cluster's recovery identity: labelled
// with the Cluster; the RoleBinding, in the Cluster's namespace, is also
// controlled by it (the ServiceAccount lives in the cluster namespace, which
// goes with the Cluster).
type recoveryOwner struct {
	cluster *fleet.Cluster
	scheme  *runtime.Scheme
}

func (o recoveryOwner) Own(obj client.Object) error {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[fleet.ManagedLabel] = "true"
	labels[fleet.ClusterLabel] = o.cluster.Name
	labels[fleet.ClusterNamespaceLabel] = o.cluster.Namespace
	obj.SetLabels(labels)
	if obj.GetNamespace() == o.cluster.Namespace {
		return controllerutil.SetControllerReference(o.cluster, obj, o.scheme)
	}
	return nil
}

func (o recoveryOwner) Check(obj client.Object) error {
	l := obj.GetLabels()
	if l[fleet.ClusterLabel] == o.cluster.Name && l[fleet.ClusterNamespaceLabel] == o.cluster.Namespace {
		if ref := metav1.GetControllerOf(obj); ref == nil || ref.UID == o.cluster.UID {
			return nil
		}
	}
	return reconciler.Wait(ObjectConflictReason, reconciler.ConflictRetry,
		"%s %s/%s exists and was not made for this Cluster's recovery identity: delete it so the cluster's agent can recover by itself",
		reconciler.KindOf(o.scheme, obj), obj.GetNamespace(), obj.GetName())
}
