package token

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/clusterns"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// A token's import identity picks its agents' credentials up by name: one
// RoleBinding per token, in the system registration namespace, to the
// ClusterRole registration.CredentialPickupClusterRole (charts/fleet), which
// allows get, and only get, of Secrets there. Credential Secrets are named
// c-<sha256 of clientID and the agent's clientRandom>, which no one else
// knows, and a registration's credential is sealed to a key only its agent
// holds; so no Role has to be made, and removed, for each registration.
// The binding lives outside the token's namespace, where owner references
// do not reach: annotations name its token, and the token reconciler
// deletes it when the token is gone (watching the bindings, so one missed
// while the controller was down is found when it starts).

// Annotations of a pickup binding naming its token.
const (
	pickupTokenNamespaceAnnotation = "fleet.cattle.io/token-namespace"
	pickupTokenNameAnnotation      = "fleet.cattle.io/token-name"
	// pickupLabel marks the pickup bindings (value "true").
	pickupLabel = "fleet.cattle.io/credential-pickup"
)

// PickupBindingName is the name of a token's pickup RoleBinding: a hash of
// its namespace and name (both may be longer than a name allows together).
func PickupBindingName(namespace, token string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + token))
	return "credential-pickup-" + hex.EncodeToString(sum[:])[:20]
}

// pickupOwner makes and recognises a token's pickup binding.
type pickupOwner struct {
	token *fleet.ClusterRegistrationToken
}

func (o pickupOwner) Own(obj client.Object) error {
	obj.SetLabels(map[string]string{fleet.ManagedLabel: "true", pickupLabel: "true"})
	obj.SetAnnotations(map[string]string{
		pickupTokenNamespaceAnnotation: o.token.Namespace,
		pickupTokenNameAnnotation:      o.token.Name,
	})
	return nil
}

func (o pickupOwner) Check(obj client.Object) error {
	a := obj.GetAnnotations()
	if obj.GetLabels()[pickupLabel] != "true" || a[pickupTokenNamespaceAnnotation] != o.token.Namespace || a[pickupTokenNameAnnotation] != o.token.Name {
		return reconciler.Wait(ObjectConflictReason, reconciler.ConflictRetry,
			"RoleBinding %s/%s exists and is not this token's credential pickup binding: delete it", obj.GetNamespace(), obj.GetName())
	}
	return nil
}

// ensurePickupBinding lets the import identity get Secrets in the system
// registration namespace by name.
func (r *Reconciler) ensurePickupBinding(ctx context.Context, p *pass) error {
	if r.objects == nil {
		r.objects = reconciler.NewObjects(r.Client, nil)
	}
	// The first token may come before any registration made the namespace.
	if err := clusterns.Ensure(ctx, r.Client, nil, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: config.DefaultSystemRegistrationNS}}); err != nil {
		return err
	}
	_, err := r.objects.Ensure(ctx, pickupOwner{token: p.token}, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: config.DefaultSystemRegistrationNS, Name: PickupBindingName(p.token.Namespace, p.token.Name)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: registration.CredentialPickupClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: p.token.Namespace, Name: ImportServiceAccountName(p.token.Name)}},
	})
	return err
}

// deletePickupBinding removes the pickup binding of the token key names,
// if there is one and it is that token's.
func (r *Reconciler) deletePickupBinding(ctx context.Context, key client.ObjectKey) error {
	rb := &rbacv1.RoleBinding{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: config.DefaultSystemRegistrationNS, Name: PickupBindingName(key.Namespace, key.Name)}, rb)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	a := rb.Annotations
	if rb.Labels[pickupLabel] != "true" || a[pickupTokenNamespaceAnnotation] != key.Namespace || a[pickupTokenNameAnnotation] != key.Name {
		return nil
	}
	if err := r.Client.Delete(ctx, rb, client.Preconditions{UID: ptr.To(rb.UID)}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting the credential pickup RoleBinding %s/%s of token %s: %w", rb.Namespace, rb.Name, key, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("deleted the credential pickup RoleBinding of a token that is gone", "roleBinding", rb.Namespace+"/"+rb.Name)
	return nil
}

// pickupBindingToken maps a pickup binding to its token.
func pickupBindingToken(_ context.Context, obj client.Object) []ctrl.Request {
	if obj.GetNamespace() != config.DefaultSystemRegistrationNS || obj.GetLabels()[pickupLabel] != "true" {
		return nil
	}
	a := obj.GetAnnotations()
	if a[pickupTokenNamespaceAnnotation] == "" || a[pickupTokenNameAnnotation] == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: a[pickupTokenNamespaceAnnotation], Name: a[pickupTokenNameAnnotation]}}}
}
