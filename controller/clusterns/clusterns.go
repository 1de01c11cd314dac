// Package clusterns makes the namespaces the controller needs: the
// per-cluster namespace of a Cluster (names.NewClusterNamespace), which both
// the Cluster reconciler and the registration reconciler make, whichever
// comes first, and the system registration namespace. Both reconcilers call
// Ensure, so they agree on what an existing namespace means.
package clusterns

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// DeletingRetry is how often to look again at a namespace that is still
// being deleted (namespaces are not watched).
const DeletingRetry = 2 * time.Second

// Ensure creates ns if it is missing. It returns nil when a namespace of
// that name exists and may be used, and otherwise a *reconciler.Waiting:
//
//   - a namespace of that name is being deleted: wait (DeletingRetry) and
//     create it again once it is gone, whoever it was made for;
//   - a per-cluster namespace (ns carries the Cluster annotations) exists
//     and was made for another Cluster (names are shortened with a hash, so
//     two Clusters could be given one name): never shared, a conflict a
//     person must resolve, looked at again every reconciler.ConflictRetry,
//     with a Warning event;
//   - it was created meanwhile by someone else: look again at once.
//
// The cache is read first, then live (the API server, may be nil) when the
// cache does not show it: the other reconciler may have just made it, and a
// read is cheaper than a create that fails. The create is written under
// reconciler.FieldManager.
func Ensure(ctx context.Context, c client.Client, live client.Reader, ns *corev1.Namespace) error {
	existing := &corev1.Namespace{}
	err := c.Get(ctx, client.ObjectKey{Name: ns.Name}, existing)
	if apierrors.IsNotFound(err) && live != nil {
		err = live.Get(ctx, client.ObjectKey{Name: ns.Name}, existing)
	}
	switch {
	case err == nil && !existing.DeletionTimestamp.IsZero():
		return reconciler.Wait(fleet.WaitingReason, DeletingRetry, "namespace %s is being deleted; waiting to create it again", ns.Name)
	case err == nil && !sameCluster(existing, ns):
		return reconciler.Wait(fleet.NamespaceConflictReason, reconciler.ConflictRetry,
			"the cluster namespace %s exists and was not made for Cluster %s/%s (%s): delete or rename whichever is wrong",
			ns.Name, ns.Annotations[fleet.ClusterNamespaceAnnotation], ns.Annotations[fleet.ClusterAnnotation], madeFor(existing)).WithEvent(corev1.EventTypeWarning)
	case err == nil:
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading namespace %s: %w", ns.Name, err)
	}
	if err := c.Create(ctx, ns, client.FieldOwner(reconciler.FieldManager)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Made meanwhile: look again (whose is it?).
			return reconciler.Wait(fleet.ProgressingReason, reconciler.CacheLagRetry, "namespace %s was created meanwhile", ns.Name)
		}
		return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("created namespace", "namespace", ns.Name)
	return nil
}

// sameCluster reports whether an existing namespace may be used as want: a
// per-cluster namespace only for the Cluster it was made for, any other (the
// system registration namespace) as it is.
func sameCluster(existing, want *corev1.Namespace) bool {
	ws, cluster := want.Annotations[fleet.ClusterNamespaceAnnotation], want.Annotations[fleet.ClusterAnnotation]
	return cluster == "" || names.NamespaceIsFor(existing, ws, cluster)
}

// madeFor says whose an existing namespace is, by its annotations.
func madeFor(ns *corev1.Namespace) string {
	ws, cluster := ns.Annotations[fleet.ClusterNamespaceAnnotation], ns.Annotations[fleet.ClusterAnnotation]
	if ws == "" && cluster == "" {
		return "it names no Cluster"
	}
	return fmt.Sprintf("it was made for Cluster %s/%s", ws, cluster)
}
