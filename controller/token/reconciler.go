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
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/controller/sharding"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// ControllerName names the controller (logs, metrics).
const ControllerName = "clusterregistrationtoken"

// Event reasons.
const (
	// TTLRequiredReason: a token without TTL was deleted because the
	// controller requires one.
	TTLRequiredReason = "TTLRequired"
	// ExpiredReason: a token reached its TTL and was deleted.
	ExpiredReason = "Expired"
)

// ObjectConflictReason (condition reason): an object the token needs exists
// and belongs to someone else.
const ObjectConflictReason = "ObjectConflict"

// statusRules are the token's kstatus rules: Ready says whether its values
// Secret can be used.
var statusRules = reconciler.Conditions{Ready: fleet.ReadyCondition, Failing: "making the import identity and values Secret failed"}

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

	// objects makes the token's objects (made on first use).
	objects     *reconciler.Objects
	objectsOnce sync.Once
	// filled holds, per values Secret, the resourceVersion of this
	// reconciler's own write of its bearer token (fillMadeSecret), whose
	// event brings nothing back.
	filled sync.Map
}

// SetupWithManager registers the controller. It subscribes to configuration
// changes, so call it before the manager starts.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.objects = reconciler.NewObjects(r.Client, mgr.GetAPIReader())
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&fleet.ClusterRegistrationToken{}, builder.WithPredicates(tokenChanged)).
		// What a token is made of comes back when it is changed or deleted;
		// its creation (this reconciler's own, in the pass that writes the
		// token's status) brings nothing: a pass on a cache that does not
		// show that status yet would only fail its status patch.
		Owns(&corev1.ServiceAccount{}, builder.WithPredicates(notCreated)).
		Owns(&rbacv1.Role{}, builder.WithPredicates(notCreated)).
		Owns(&rbacv1.RoleBinding{}, builder.WithPredicates(notCreated)).
		// Nor does the write of a new Secret's bearer token, in the pass
		// that made it (the pass after it would read and dry-run every
		// object again, and fail its status patch on a cache without the
		// status that pass wrote).
		Owns(&corev1.Secret{}, builder.OnlyMetadata, builder.WithPredicates(notCreated, predicate.Funcs{UpdateFunc: r.notOwnFill, DeleteFunc: r.forgetFill})).
		WatchesRawSource(source.Channel(r.Config.Subscribe(), handler.EnqueueRequestsFromMapFunc(r.allTokens))).
		Complete(r)
}

// tokenChanged passes a token's changes of spec (generation) and metadata.
// A status write (this reconciler's own, or a grant's reservation under
// maxClusters) brings nothing: such a pass found every object as it was, at
// the cost of a dry run of each.
var tokenChanged = predicate.Or[client.Object](
	predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{})

// notCreated passes every event of an object but its creation.
var notCreated = predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }}

// notOwnFill passes every update of a values Secret but the one of this
// reconciler's own fillMadeSecret, recognised by its resourceVersion.
func (r *Reconciler) notOwnFill(e event.UpdateEvent) bool {
	key := client.ObjectKeyFromObject(e.ObjectNew).String()
	if rv, ok := r.filled.Load(key); ok && rv == e.ObjectNew.GetResourceVersion() {
		r.filled.CompareAndDelete(key, rv)
		return false
	}
	return true
}

// forgetFill drops what notOwnFill keeps of a deleted Secret (a fill whose
// event came before it was recorded), and passes the deletion.
func (r *Reconciler) forgetFill(e event.DeleteEvent) bool {
	r.filled.Delete(client.ObjectKeyFromObject(e.Object).String())
	return true
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

// pass is what one reconcile of a token works on and finds.
type pass struct {
	token   *fleet.ClusterRegistrationToken
	cfg     *config.Config
	now     time.Time
	expires *time.Time

	sa *corev1.ServiceAccount
	// secret is the values Secret as read, or as made empty by this pass
	// (secretMade).
	secret     *corev1.Secret
	secretMade bool
	// secretName is set once the values Secret holds a bearer token.
	secretName string
	// renewAt is when the bearer token must be replaced (zero: never).
	renewAt time.Time
}

// phases make the import identity (a ServiceAccount whose Role allows only
// creating ClusterRegistrations in the token's namespace) and the values
// Secret.
func (r *Reconciler) phases() reconciler.Phases[*pass] {
	return reconciler.Phases[*pass]{
		{Name: "identity", Run: r.ensureIdentity},
		{Name: "values-secret", Run: r.ensureValuesSecret},
	}
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
	now := reconciler.Clock(r.Now).Now()
	ttl := tokenTTL(token)
	if ttl == 0 && cfg.RegistrationTokenTTLRequired {
		log.Info("deleting ClusterRegistrationToken without TTL: the controller requires one")
		reconciler.Eventf(r.Recorder, token, nil, corev1.EventTypeWarning, TTLRequiredReason, "Delete",
			"the controller requires a TTL on ClusterRegistrationTokens (registrationTokenTTLRequired), so this token was deleted: create it again with spec.ttl set, such as 12h")
		return ctrl.Result{}, r.deleteToken(ctx, token)
	}
	var expires *time.Time
	if ttl > 0 {
		e := expiresAt(token.CreationTimestamp.Time, ttl)
		if !now.Before(e) {
			log.Info("deleting expired ClusterRegistrationToken", "expires", e.UTC().Format(time.RFC3339))
			reconciler.Eventf(r.Recorder, token, nil, corev1.EventTypeNormal, ExpiredReason, "Delete",
				"the token expired at %s (ttl %s); it was deleted with its ServiceAccount, Role, RoleBinding and values Secret", e.UTC().Format(time.RFC3339), ttl)
			return ctrl.Result{}, r.deleteToken(ctx, token)
		}
		expires = &e
	}

	patcher, err := reconciler.NewStatusPatcher(r.Client, token, statusRules.Owned()...)
	if err != nil {
		return ctrl.Result{}, err
	}
	p := &pass{token: token, cfg: cfg, now: now, expires: expires}
	err = r.phases().Run(ctx, p)
	out := setStatus(token, cfg, p.secretName, err, expires, now)
	if err := patcher.Patch(ctx, token); err != nil {
		return ctrl.Result{}, errors.Join(out.Err, err)
	}

	switch out.Kind() {
	case reconciler.KindRaced:
		log.V(1).Info("object changed meanwhile or not in the cache yet; retrying", "error", out.Err.Error())
	case reconciler.KindWaiting:
		w := out.Waiting()
		log.Info("ClusterRegistrationToken is waiting", "reason", w.Reason, "message", w.Message)
	}
	// Come back exactly at expiry, or when the bearer token must be renewed.
	var schedule time.Duration
	if expires != nil {
		schedule = expires.Sub(now)
	}
	if !p.renewAt.IsZero() {
		schedule = reconciler.Earliest(schedule, max(p.renewAt.Sub(now), time.Second))
	}
	return out.Result(schedule)
}

// owner makes and recognises the objects of one token: controlled by it
// (owner reference, so the garbage collector removes them with it) and
// labelled managed.
type owner struct {
	token  *fleet.ClusterRegistrationToken
	scheme *runtime.Scheme
}

// Own labels obj managed and makes the token its controller.
func (o owner) Own(obj client.Object) error {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[fleet.ManagedLabel] = "true"
	obj.SetLabels(labels)
	return controllerutil.SetControllerReference(o.token, obj, o.scheme)
}

// Check accepts an existing object only when this very token (same UID)
// controls it: an object left by an earlier token of the same name is
// waiting for the garbage collector, and one made by someone else is not
// ours to take.
func (o owner) Check(obj client.Object) error {
	ref := metav1.GetControllerOf(obj)
	if ref != nil && ref.UID == o.token.UID && obj.GetDeletionTimestamp().IsZero() {
		return nil
	}
	kind := reconciler.KindOf(o.scheme, obj)
	key := client.ObjectKeyFromObject(obj).String()
	if (ref != nil && ref.Kind == "ClusterRegistrationToken" && ref.Name == o.token.Name) || !obj.GetDeletionTimestamp().IsZero() {
		// Its deletion brings the token back here; the retry is a safety net.
		return reconciler.Wait(fleet.WaitingReason, reconciler.ConflictRetry,
			"waiting for %s %s, left by an earlier token of the same name, to be deleted", kind, key)
	}
	return reconciler.Wait(ObjectConflictReason, reconciler.ConflictRetry,
		"%s %s exists and does not belong to this token: delete it, or give the token another name", kind, key)
}

func (r *Reconciler) owner(token *fleet.ClusterRegistrationToken) owner {
	return owner{token: token, scheme: r.Client.Scheme()}
}

// ensureIdentity makes the import ServiceAccount, its Role then its
// RoleBinding, and the values Secret (empty when new: the bearer token is
// bound to its UID), the three side by side: a new token is ready in the
// round trips of two objects, not of four. The RoleBinding waits for its
// Role: the controller may not bind a role it does not hold (no "bind"
// verb), so the API server checks the Role's rules, which must exist.
func (r *Reconciler) ensureIdentity(ctx context.Context, p *pass) error {
	r.objectsOnce.Do(func() { r.objects = reconciler.NewObjects(r.Client, nil) })
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.ensureServiceAccount(gctx, p) })
	g.Go(func() error {
		if err := r.ensureRole(gctx, p); err != nil {
			return err
		}
		return r.ensureRoleBinding(gctx, p)
	})
	g.Go(func() error { return r.ensureSecretExists(gctx, p) })
	return g.Wait()
}

// ensureServiceAccount makes the import ServiceAccount.
func (r *Reconciler) ensureServiceAccount(ctx context.Context, p *pass) error {
	p.sa = &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Namespace: p.token.Namespace, Name: ImportServiceAccountName(p.token.Name)},
		AutomountServiceAccountToken: ptr.To(false),
	}
	_, err := r.ensure(ctx, p, p.sa)
	return err
}

// ensureRole makes the Role that allows only creating ClusterRegistrations
// in the token's namespace, and reading one by its name: an agent reads
// its answer, sealed to its key, in the status of the registration it made.
// No list, no watch: an agent names its registration with 128 random bits,
// so it cannot find another's, and could not open another's credential.
func (r *Reconciler) ensureRole(ctx context.Context, p *pass) error {
	_, err := r.ensure(ctx, p, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.token.Namespace, Name: ImportServiceAccountName(p.token.Name)},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{fleet.GroupVersion.Group},
			Resources: []string{"clusterregistrations"},
			Verbs:     []string{"create", "get"},
		}},
	})
	return err
}

// ensureRoleBinding binds the Role to the import ServiceAccount.
func (r *Reconciler) ensureRoleBinding(ctx context.Context, p *pass) error {
	name := ImportServiceAccountName(p.token.Name)
	_, err := r.ensure(ctx, p, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.token.Namespace, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: p.token.Namespace}},
	})
	return err
}

func (r *Reconciler) ensure(ctx context.Context, p *pass, obj client.Object, opts ...reconciler.EnsureOption) (reconciler.Action, error) {
	r.objectsOnce.Do(func() { r.objects = reconciler.NewObjects(r.Client, nil) })
	return r.objects.Ensure(ctx, r.owner(p.token), obj, opts...)
}

// ensureSecretExists reads the values Secret, or makes it empty.
func (r *Reconciler) ensureSecretExists(ctx context.Context, p *pass) error {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.token.Namespace, Name: p.token.Name}}
	key := client.ObjectKeyFromObject(secret)
	// Secrets are not cached: this reads the API server.
	err := r.Client.Get(ctx, key, secret)
	switch {
	case apierrors.IsNotFound(err):
		// Made empty first: the bearer token is bound to its UID. Made
		// only if there is still none (this read is the check).
		secret.Type = corev1.SecretTypeOpaque
		if _, err := r.ensure(ctx, p, secret, reconciler.ExpectUID("")); err != nil {
			return err
		}
		p.secretMade = true
	case err != nil:
		return fmt.Errorf("reading values Secret %s: %w", key, err)
	default:
		if err := r.owner(p.token).Check(secret); err != nil {
			return err
		}
	}
	p.secret = secret
	return nil
}

// ensureValuesSecret makes the Secret with the token's name whose key
// "values" is the agent's values file, minting the import bearer token once
// (and again only when it nears its expiry). It records the Secret's name
// once it holds a token, and when the token must be renewed.
func (r *Reconciler) ensureValuesSecret(ctx context.Context, p *pass) error {
	log := ctrl.LoggerFrom(ctx)
	token, sa, secret := p.token, p.sa, p.secret
	key := client.ObjectKeyFromObject(secret)

	bearer := Bearer(secret) // none, or unreadable: mint anew
	issued, exp, ok := bearerTimes(secret, sa)
	renew := time.Time{}
	if ok {
		renew = renewAt(issued, exp, p.expires)
	}
	if bearer == "" || !ok || (!renew.IsZero() && !p.now.Before(renew)) {
		lifetime := requestedLifetime(p.now, p.expires)
		tr, err := r.Clientset.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: ptr.To(int64(lifetime / time.Second)),
				BoundObjectRef: &authenticationv1.BoundObjectReference{
					Kind: "Secret", APIVersion: "v1", Name: secret.Name, UID: secret.UID,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
		}
		bearer, issued, exp = tr.Status.Token, p.now, tr.Status.ExpirationTimestamp.Time
		renew = renewAt(issued.Truncate(time.Second), exp.Truncate(time.Second), p.expires)
		log.Info("minted import token", "serviceAccount", sa.Namespace+"/"+sa.Name, "secret", key.String(), "tokenExpires", exp.UTC().Format(time.RFC3339))
	}

	values, err := valuesFile(p.cfg, token, bearer)
	if err != nil {
		return err
	}
	// Everything the controller sets on the Secret, every time: a field
	// left out of an apply is removed.
	desired := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Annotations: map[string]string{
			TokenIssuedAnnotation:            issued.UTC().Format(time.RFC3339),
			TokenExpiresAnnotation:           exp.UTC().Format(time.RFC3339),
			TokenServiceAccountUIDAnnotation: string(sa.UID),
		}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{ValuesKey: values},
	}
	if p.secretMade {
		if err := r.fillMadeSecret(ctx, secret, desired); err != nil {
			return err
		}
	} else if _, err := r.ensure(ctx, p, desired, reconciler.ExpectUID(secret.UID)); err != nil {
		// Only into the Secret the bearer token is bound to: one deleted
		// (and made again by someone, or by the garbage collector's race
		// with a pass) since this pass read it would carry a revoked token.
		return err
	}
	p.secretName, p.renewAt = desired.Name, renew
	return nil
}

// fillMadeSecret writes desired's annotations, type and data into made, the
// values Secret this pass made empty: one update conditioned on the
// resourceVersion of that create, so it lands only in the Secret the bearer
// token is bound to (a conflict otherwise, and the next pass starts over).
// An apply would read it, dry-run, hand the create's fields over, apply and
// read it again: five requests more on the way of every manager-initiated
// registration. The fields stay apply.FieldManager's, as the create's are,
// and pass to the apply of the Secret's next change.
func (r *Reconciler) fillMadeSecret(ctx context.Context, made, desired *corev1.Secret) error {
	s := made.DeepCopy()
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	for k, v := range desired.Annotations {
		s.Annotations[k] = v
	}
	s.Type, s.Data = desired.Type, desired.Data
	if err := r.Client.Update(ctx, s, client.FieldOwner(apply.FieldManager)); err != nil {
		return fmt.Errorf("writing the bearer token into values Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	r.filled.Store(client.ObjectKeyFromObject(s).String(), s.ResourceVersion)
	return nil
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

// setStatus computes the token's status from what the pass found (the
// values Secret's name once it holds a bearer token) and how it ended, and
// returns the outcome.
func setStatus(token *fleet.ClusterRegistrationToken, cfg *config.Config, secretName string, err error, expires *time.Time, now time.Time) reconciler.Outcome {
	token.Status.Expires = nil
	if expires != nil {
		token.Status.Expires = ptr.To(metav1.NewTime(*expires))
	}
	if secretName != "" {
		token.Status.SecretName = secretName
	}
	var out reconciler.Outcome
	switch {
	case err != nil:
		out = reconciler.Failure(err)
	case cfg.APIServerURL == "":
		out = reconciler.Failure(reconciler.Stall(fleet.MissingAPIServerURLReason,
			"values Secret %s has no apiServerURL: set apiServerURL in the %s ConfigMap of the controller so agents can reach this cluster", secretName, config.ConfigMapName))
	default:
		out = reconciler.Success(fleet.SucceededReason,
			"values Secret %s is ready: kubectl get secret -n %s %s -o jsonpath='{.data.values}' | base64 -d > values.yaml; "+
				"helm install fleet-agent charts/fleet-agent -n %s --create-namespace -f values.yaml",
			secretName, token.Namespace, secretName, config.DefaultSystemNamespace)
	}
	statusRules.Set(token, out, now)
	return out
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
