// Package token reconciles ClusterRegistrationTokens: for each token it makes
// the import identity (a ServiceAccount whose Role allows only creating
// ClusterRegistrations in the token's namespace) and a Secret with the
// token's name whose key "values" is the values file for
// `helm install fleet-agent charts/fleet-agent`. Tokens with a TTL are
// deleted, with everything they made, exactly when they expire.
package token

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/controller/sharding"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// ControllerName names the controller (logs, metrics).
const ControllerName = "clusterregistrationtoken"

// FieldManager is the field manager of every write of this controller.
const FieldManager = "fleet-controller"

// Event reasons.
const (
	// TTLRequiredReason: a token without TTL was deleted because the
	// controller requires one.
	TTLRequiredReason = "TTLRequired"
	// ExpiredReason: a token reached its TTL and was deleted.
	ExpiredReason = "Expired"
)

// Condition reasons of this controller not shared in the API package.
const (
	// ObjectConflictReason: an object the token needs exists and belongs to
	// someone else.
	ObjectConflictReason = "ObjectConflict"
	// conflictRetry is how often a token whose objects are taken is looked at
	// again (nothing else tells the controller when the other object goes).
	conflictRetry = time.Minute
	// cacheLagRetry is how soon to retry when an object the cache did not
	// show yet turned out to exist.
	cacheLagRetry = time.Second
)

// Reconciler reconciles ClusterRegistrationTokens.
type Reconciler struct {
	// Shard is this replica's share of the tokens (zero: all).
	Shard sharding.Shard
	// Client is the manager's client. Secrets are not cached: reads of them
	// go to the API server, and the controller never lists them.
	Client client.Client
	// Config is the controller configuration in force.
	Config *configstore.Store
	// Clientset serves the TokenRequest API.
	Clientset kubernetes.Interface
	// Recorder records events on tokens.
	Recorder recorder.EventRecorder
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// SetupWithManager registers the controller. It subscribes to configuration
// changes, so call it before the manager starts.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&fleet.ClusterRegistrationToken{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&corev1.Secret{}, builder.OnlyMetadata).
		WatchesRawSource(source.Channel(r.Config.Subscribe(), handler.EnqueueRequestsFromMapFunc(r.allTokens))).
		Complete(r)
}

// allTokens maps a configuration change to every token, so their values are
// rendered again.
func (r *Reconciler) allTokens(ctx context.Context, _ client.Object) []ctrl.Request {
	list := &fleet.ClusterRegistrationTokenList{}
	if err := r.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing ClusterRegistrationTokens after a configuration change")
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(list.Items))
	for _, t := range list.Items {
		reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
	}
	return reqs
}

// ImportServiceAccountName is the name of a token's import ServiceAccount,
// Role and RoleBinding.
func ImportServiceAccountName(token string) string {
	return registration.ImportServiceAccountName(token)
}

// waitError means the token cannot be made ready until something else
// changes; it becomes a Ready=False condition, not a failure.
type waitError struct {
	reason, message string
	retry           time.Duration
}

func (e *waitError) Error() string { return e.message }

// outcome is what one pass observed, from which the status is computed.
type outcome struct {
	// secretName is set once the values Secret holds a bearer token.
	secretName string
	// renewAt is when the bearer token must be replaced (zero: never).
	renewAt time.Time
	// wait is set when the token is waiting on something.
	wait *waitError
	// err is set when the pass failed.
	err error
}

// Reconcile makes a token's import identity and values Secret, and deletes
// the token when it expired or lacks a TTL the configuration requires.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !r.Shard.OwnsKey(req.String()) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	token := &fleet.ClusterRegistrationToken{}
	if err := r.Client.Get(ctx, req.NamespacedName, token); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !token.DeletionTimestamp.IsZero() {
		// Owner references let the garbage collector remove the rest.
		return ctrl.Result{}, nil
	}

	cfg := r.Config.Get()
	now := r.now()
	ttl := tokenTTL(token)
	if ttl == 0 && cfg.RegistrationTokenTTLRequired {
		log.Info("deleting ClusterRegistrationToken without TTL: the controller requires one")
		r.event(token, corev1.EventTypeWarning, TTLRequiredReason, "Delete",
			"the controller requires a TTL on ClusterRegistrationTokens (registrationTokenTTLRequired), so this token was deleted: create it again with spec.ttl set, such as 12h")
		return ctrl.Result{}, r.deleteToken(ctx, token)
	}
	var expires *time.Time
	if ttl > 0 {
		e := expiresAt(token.CreationTimestamp.Time, ttl)
		if !now.Before(e) {
			log.Info("deleting expired ClusterRegistrationToken", "expires", e.UTC().Format(time.RFC3339))
			r.event(token, corev1.EventTypeNormal, ExpiredReason, "Delete",
				"the token expired at %s (ttl %s); it was deleted with its ServiceAccount, Role, RoleBinding and values Secret", e.UTC().Format(time.RFC3339), ttl)
			return ctrl.Result{}, r.deleteToken(ctx, token)
		}
		expires = &e
	}

	base := token.DeepCopy()
	out := r.reconcile(ctx, token, cfg, now, expires)
	setStatus(token, cfg, out, expires, now)
	if err := r.patchStatus(ctx, base, token); err != nil {
		return ctrl.Result{}, errors.Join(out.err, err)
	}

	var result ctrl.Result
	switch {
	case out.err != nil && apierrors.IsAlreadyExists(out.err):
		// The cache had not shown an object made by an earlier pass yet.
		log.V(1).Info("object exists but was not in the cache yet; retrying", "error", out.err.Error())
		return ctrl.Result{RequeueAfter: cacheLagRetry}, nil
	case out.err != nil:
		return ctrl.Result{}, out.err
	case out.wait != nil:
		log.Info("ClusterRegistrationToken is waiting", "reason", out.wait.reason, "message", out.wait.message)
		result.RequeueAfter = out.wait.retry
	}
	// Come back exactly at expiry, or when the bearer token must be renewed.
	if expires != nil {
		result.RequeueAfter = earliest(result.RequeueAfter, expires.Sub(now))
	}
	if !out.renewAt.IsZero() {
		result.RequeueAfter = earliest(result.RequeueAfter, max(out.renewAt.Sub(now), time.Second))
	}
	return result, nil
}

// reconcile makes the import identity and the values Secret.
func (r *Reconciler) reconcile(ctx context.Context, token *fleet.ClusterRegistrationToken, cfg *config.Config, now time.Time, expires *time.Time) outcome {
	sa, err := r.ensureImportIdentity(ctx, token)
	if err != nil {
		return failed(err)
	}
	secretName, renew, err := r.ensureValuesSecret(ctx, token, sa, cfg, now, expires)
	if err != nil {
		return failed(err)
	}
	return outcome{secretName: secretName, renewAt: renew}
}

func failed(err error) outcome {
	var w *waitError
	if errors.As(err, &w) {
		return outcome{wait: w}
	}
	return outcome{err: err}
}

// ensureImportIdentity makes the import ServiceAccount, a Role that allows
// only creating ClusterRegistrations in the token's namespace, and the
// RoleBinding between them.
func (r *Reconciler) ensureImportIdentity(ctx context.Context, token *fleet.ClusterRegistrationToken) (*corev1.ServiceAccount, error) {
	name := ImportServiceAccountName(token.Name)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: token.Namespace, Name: name}}
	if err := r.ensure(ctx, token, sa, func() error {
		sa.AutomountServiceAccountToken = ptr.To(false)
		return nil
	}); err != nil {
		return nil, err
	}

	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: token.Namespace, Name: name}}
	if err := r.ensure(ctx, token, role, func() error {
		role.Rules = []rbacv1.PolicyRule{{
			APIGroups: []string{fleet.GroupVersion.Group},
			Resources: []string{"clusterregistrations"},
			Verbs:     []string{"create"},
		}}
		return nil
	}); err != nil {
		return nil, err
	}

	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: token.Namespace, Name: name}}
	roleRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}
	if err := r.ensure(ctx, token, rb, func() error {
		if !rb.CreationTimestamp.IsZero() && rb.RoleRef != roleRef {
			return errRoleRefChanged
		}
		rb.RoleRef = roleRef
		rb.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}
		return nil
	}); err != nil {
		if !errors.Is(err, errRoleRefChanged) {
			return nil, err
		}
		// roleRef is immutable: replace the binding; its deletion brings
		// the token back here.
		ctrl.LoggerFrom(ctx).Info("replacing RoleBinding with a changed roleRef", "roleBinding", client.ObjectKeyFromObject(rb).String())
		if err := r.Client.Delete(ctx, rb, client.Preconditions{UID: ptr.To(rb.UID)}); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("deleting RoleBinding %s/%s to replace its roleRef: %w", rb.Namespace, rb.Name, err)
		}
		return nil, &waitError{reason: fleet.ProgressingReason, message: fmt.Sprintf("replacing RoleBinding %s/%s", rb.Namespace, rb.Name), retry: cacheLagRetry}
	}
	return sa, nil
}

var errRoleRefChanged = errors.New("roleRef changed")

// ensure creates obj (named by its key) as mutate describes it, owned by the
// token and labelled managed, or updates it when the fields mutate sets
// differ. An unchanged object is never written. An object with that name
// that this token does not own is left alone and reported.
func (r *Reconciler) ensure(ctx context.Context, token *fleet.ClusterRegistrationToken, obj client.Object, mutate func() error) error {
	log := ctrl.LoggerFrom(ctx)
	kind := kindOf(obj)
	key := client.ObjectKeyFromObject(obj)
	err := r.Client.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		if err := mutate(); err != nil {
			return err
		}
		if err := r.own(token, obj); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, obj, client.FieldOwner(FieldManager)); err != nil {
			return fmt.Errorf("creating %s %s: %w", kind, key, err)
		}
		log.Info("created "+kind, lowerFirst(kind), key.String())
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s %s: %w", kind, key, err)
	}
	if err := checkOwner(token, obj, kind); err != nil {
		return err
	}
	before := obj.DeepCopyObject()
	if err := mutate(); err != nil {
		return err
	}
	if err := r.own(token, obj); err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(before, obj) {
		return nil
	}
	if err := r.Client.Update(ctx, obj, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("updating %s %s: %w", kind, key, err)
	}
	log.Info("updated "+kind, lowerFirst(kind), key.String())
	return nil
}

// own labels obj managed and makes the token its controller.
func (r *Reconciler) own(token *fleet.ClusterRegistrationToken, obj client.Object) error {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[fleet.ManagedLabel] = "true"
	obj.SetLabels(labels)
	return controllerutil.SetControllerReference(token, obj, r.Client.Scheme())
}

// checkOwner accepts an existing object only when this very token (same
// UID) controls it: an object left by an earlier token of the same name is
// waiting for the garbage collector, and one made by someone else is not
// ours to take.
func checkOwner(token *fleet.ClusterRegistrationToken, obj client.Object, kind string) error {
	ref := metav1.GetControllerOf(obj)
	if ref != nil && ref.UID == token.UID && obj.GetDeletionTimestamp().IsZero() {
		return nil
	}
	key := client.ObjectKeyFromObject(obj).String()
	if (ref != nil && ref.Kind == "ClusterRegistrationToken" && ref.Name == token.Name) || !obj.GetDeletionTimestamp().IsZero() {
		// Its deletion brings the token back here; the retry is a safety net.
		return &waitError{
			reason:  fleet.WaitingReason,
			message: fmt.Sprintf("waiting for %s %s, left by an earlier token of the same name, to be deleted", kind, key),
			retry:   conflictRetry,
		}
	}
	return &waitError{
		reason:  ObjectConflictReason,
		message: fmt.Sprintf("%s %s exists and does not belong to this token: delete it, or give the token another name", kind, key),
		retry:   conflictRetry,
	}
}

// ensureValuesSecret makes the Secret with the token's name whose key
// "values" is the agent's values file, minting the import bearer token once
// (and again only when it nears its expiry). It returns the Secret's name
// once it holds a token, and when the token must be renewed.
func (r *Reconciler) ensureValuesSecret(ctx context.Context, token *fleet.ClusterRegistrationToken, sa *corev1.ServiceAccount, cfg *config.Config, now time.Time, expires *time.Time) (string, time.Time, error) {
	log := ctrl.LoggerFrom(ctx)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: token.Namespace, Name: token.Name}}
	key := client.ObjectKeyFromObject(secret)
	err := r.Client.Get(ctx, key, secret)
	switch {
	case apierrors.IsNotFound(err):
		// Created empty first: the bearer token is bound to its UID.
		secret.Type = corev1.SecretTypeOpaque
		if err := r.own(token, secret); err != nil {
			return "", time.Time{}, err
		}
		if err := r.Client.Create(ctx, secret, client.FieldOwner(FieldManager)); err != nil {
			return "", time.Time{}, fmt.Errorf("creating values Secret %s: %w", key, err)
		}
		log.Info("created values Secret", "secret", key.String())
	case err != nil:
		return "", time.Time{}, fmt.Errorf("reading values Secret %s: %w", key, err)
	default:
		if err := checkOwner(token, secret, "Secret"); err != nil {
			return "", time.Time{}, err
		}
	}

	desired := secret.DeepCopy()
	if err := r.own(token, desired); err != nil {
		return "", time.Time{}, err
	}
	bearer := Bearer(secret) // none, or unreadable: mint anew
	issued, exp, ok := bearerTimes(secret, sa)
	renew := time.Time{}
	if ok {
		renew = renewAt(issued, exp, expires)
	}
	if bearer == "" || !ok || (!renew.IsZero() && !now.Before(renew)) {
		lifetime := requestedLifetime(now, expires)
		tr, err := r.Clientset.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: ptr.To(int64(lifetime / time.Second)),
				BoundObjectRef: &authenticationv1.BoundObjectReference{
					Kind: "Secret", APIVersion: "v1", Name: secret.Name, UID: secret.UID,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", time.Time{}, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
		}
		bearer, issued, exp = tr.Status.Token, now, tr.Status.ExpirationTimestamp.Time
		if desired.Annotations == nil {
			desired.Annotations = map[string]string{}
		}
		desired.Annotations[TokenIssuedAnnotation] = issued.UTC().Format(time.RFC3339)
		desired.Annotations[TokenExpiresAnnotation] = exp.UTC().Format(time.RFC3339)
		desired.Annotations[TokenServiceAccountUIDAnnotation] = string(sa.UID)
		renew = renewAt(issued.Truncate(time.Second), exp.Truncate(time.Second), expires)
		log.Info("minted import token", "serviceAccount", sa.Namespace+"/"+sa.Name, "secret", key.String(), "tokenExpires", exp.UTC().Format(time.RFC3339))
	}

	values, err := valuesFile(cfg, token, bearer)
	if err != nil {
		return "", time.Time{}, err
	}
	desired.Data = map[string][]byte{ValuesKey: values}
	if equality.Semantic.DeepEqual(secret, desired) {
		return secret.Name, renew, nil
	}
	if err := r.Client.Update(ctx, desired, client.FieldOwner(FieldManager)); err != nil {
		return "", time.Time{}, fmt.Errorf("updating values Secret %s: %w", key, err)
	}
	log.Info("updated values Secret", "secret", key.String())
	return secret.Name, renew, nil
}

// bearerTimes reads when the values Secret's bearer token was issued and
// expires; ok is false when that is unknown or the token belongs to another
// ServiceAccount than sa (then it does not authenticate any more).
func bearerTimes(secret *corev1.Secret, sa *corev1.ServiceAccount) (issued, exp time.Time, ok bool) {
	a := secret.Annotations
	if a[TokenServiceAccountUIDAnnotation] != string(sa.UID) {
		return time.Time{}, time.Time{}, false
	}
	issued, err1 := time.Parse(time.RFC3339, a[TokenIssuedAnnotation])
	exp, err2 := time.Parse(time.RFC3339, a[TokenExpiresAnnotation])
	if err1 != nil || err2 != nil {
		return time.Time{}, time.Time{}, false
	}
	return issued, exp, true
}

// setStatus computes the token's status from what the pass observed.
func setStatus(token *fleet.ClusterRegistrationToken, cfg *config.Config, out outcome, expires *time.Time, now time.Time) {
	token.Status.Expires = nil
	if expires != nil {
		token.Status.Expires = ptr.To(metav1.NewTime(*expires))
	}
	if out.secretName != "" {
		token.Status.SecretName = out.secretName
	}
	cond := metav1.Condition{
		Type:               fleet.ReadyCondition,
		ObservedGeneration: token.Generation,
		LastTransitionTime: metav1.NewTime(now),
	}
	switch {
	case out.err != nil && (apierrors.IsConflict(out.err) || apierrors.IsAlreadyExists(out.err)):
		// A retry follows at once; keep the condition as it is.
		return
	case out.err != nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, fleet.ProgressingReason
		cond.Message = fmt.Sprintf("making the import identity and values Secret failed, retrying: %v", out.err)
	case out.wait != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, out.wait.reason, out.wait.message
	case cfg.APIServerURL == "":
		cond.Status, cond.Reason = metav1.ConditionFalse, fleet.MissingAPIServerURLReason
		cond.Message = fmt.Sprintf("values Secret %s has no apiServerURL: set apiServerURL in the %s ConfigMap of the controller so agents can reach this cluster", out.secretName, config.ConfigMapName)
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, fleet.SucceededReason
		cond.Message = fmt.Sprintf("values Secret %s is ready: kubectl get secret -n %s %s -o jsonpath='{.data.values}' | base64 -d > values.yaml; "+
			"helm install fleet-agent charts/fleet-agent -n %s --create-namespace -f values.yaml",
			out.secretName, token.Namespace, out.secretName, config.DefaultSystemNamespace)
	}
	meta.SetStatusCondition(&token.Status.Conditions, cond)
}

// patchStatus writes the status when it changed.
func (r *Reconciler) patchStatus(ctx context.Context, base, token *fleet.ClusterRegistrationToken) error {
	if equality.Semantic.DeepEqual(base.Status, token.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, token, client.MergeFrom(base), client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patching status of ClusterRegistrationToken %s/%s: %w", token.Namespace, token.Name, err)
	}
	return nil
}

// deleteToken deletes the token. Its values Secret goes first: the bearer
// token is bound to it, so deleting it revokes the token at once instead of
// when the garbage collector gets to it. The garbage collector removes the
// rest through owner references.
func (r *Reconciler) deleteToken(ctx context.Context, token *fleet.ClusterRegistrationToken) error {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: token.Namespace, Name: token.Name}
	err := r.Client.Get(ctx, key, secret)
	switch {
	case err == nil:
		if ref := metav1.GetControllerOf(secret); ref != nil && ref.UID == token.UID {
			if err := r.Client.Delete(ctx, secret, client.Preconditions{UID: ptr.To(secret.UID)}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				return fmt.Errorf("deleting values Secret %s: %w", key, err)
			}
		}
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading values Secret %s: %w", key, err)
	}
	err = r.Client.Delete(ctx, token, client.Preconditions{UID: ptr.To(token.UID)}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting ClusterRegistrationToken %s/%s: %w", token.Namespace, token.Name, err)
	}
	return nil
}

func (r *Reconciler) event(token *fleet.ClusterRegistrationToken, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(token, nil, eventType, reason, action, note, args...)
	}
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// earliest returns the shorter of two requeue delays, zero meaning none.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *corev1.ServiceAccount:
		return "ServiceAccount"
	case *rbacv1.Role:
		return "Role"
	case *rbacv1.RoleBinding:
		return "RoleBinding"
	case *corev1.Secret:
		return "Secret"
	}
	return fmt.Sprintf("%T", obj)
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]+'a'-'A') + s[1:]
}
