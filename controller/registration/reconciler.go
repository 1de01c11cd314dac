// Package registration reconciles ClusterRegistrations: the controller side
// of the identity handshake ("grant", shared/SPEC.md §4). For a registration
// made with a valid ClusterRegistrationToken it finds or creates the Cluster,
// makes a request identity (a ServiceAccount in the cluster namespace whose
// RBAC reaches only that cluster's BundleDeployments and its own Cluster's
// status), mints a bearer token for it and hands the token back in the
// credential Secret c-<hash>, readable only by the import identity that
// asked. Older registrations of the same cluster are removed with everything
// made for them, and the credential Secret is removed once the agent had time
// to pick it up.
package registration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/admission"
	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/controller/sharding"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// ControllerName names the controller (logs, metrics).
const ControllerName = "clusterregistration"

// Condition reasons of this controller not shared in the API package.
const (
	// ObjectConflictReason: an object the grant needs exists and belongs to
	// someone else.
	ObjectConflictReason = "ObjectConflict"
	// ClusterNameTakenReason: the Cluster cluster-<hash> that would be made
	// for the clientID exists with another clientID.
	ClusterNameTakenReason = "ClusterNameTaken"
	// DuplicateClientIDReason: several Clusters in the workspace claim the
	// registration's clientID.
	DuplicateClientIDReason = "DuplicateClientID"
	// ClusterDeletingReason: the matching Cluster is being deleted.
	ClusterDeletingReason = "ClusterDeleting"
)

// Event reasons.
const (
	// RefusedEventReason: a registration was refused or is blocked.
	RefusedEventReason = "Refused"
	// CredentialRemovedEventReason: the credential Secret was removed after
	// the pickup timeout.
	CredentialRemovedEventReason = "CredentialRemoved"
	// AgentLabelsRefusedEventReason (on a Cluster the grant made): some of
	// the agent's labels were left out.
	AgentLabelsRefusedEventReason = "AgentLabelsRefused"
)

// ServiceAccountUIDAnnotation on the credential Secret records which request
// ServiceAccount (by UID) its token was minted for, so a retried grant can
// tell whether the token still authenticates.
const ServiceAccountUIDAnnotation = "fleet.cattle.io/request-service-account-uid"

// TokenExpiresAnnotation on the credential Secret records when its token
// expires (RFC 3339), so a retried grant can tell whether it is still good
// without opening a sealed credential.
const TokenExpiresAnnotation = "fleet.cattle.io/token-expires"

// Reconciler reconciles ClusterRegistrations.
type Reconciler struct {
	// APIReader reads from the API server, past the cache (nil: the
	// manager's, set by SetupWithManager). Whether a registration is
	// granted is always read through it.
	APIReader client.Reader
	// Shard is this replica's share of the registrations (zero: all).
	Shard sharding.Shard
	// Client is the manager's client. Secrets are not cached: reads of them
	// go to the API server, and the controller never lists them.
	Client client.Client
	// Config is the controller configuration in force.
	Config *configstore.Store
	// Clientset serves the TokenRequest API.
	Clientset kubernetes.Interface
	// Recorder records events on registrations.
	Recorder recorder.EventRecorder
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// CredentialPickupTimeout is how long a credential Secret is kept after
	// the grant; zero means registration.CredentialPickupTimeout.
	CredentialPickupTimeout time.Duration
	// Admission says whether fleet's admission policies are installed as
	// shipped; nothing is granted while they are not. Required.
	Admission *admission.Checker

	// objects makes the objects of a grant (set up by SetupWithManager).
	objects     *reconciler.Objects
	objectsOnce sync.Once

	// clientLocks serialises the work on registrations of one clientID
	// (superseding compares them; two must never be granted at once), while
	// registrations of different clusters are granted in parallel.
	clientLocks keyedMutex
}

// Reconcile grants a ClusterRegistration its credential, refuses it, or,
// once granted, removes the credential Secret after the pickup timeout.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	reg := &fleet.ClusterRegistration{}
	if err := r.Client.Get(ctx, req.NamespacedName, reg); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Registrations hash by clientID, as Clusters do: one shard handles a
	// cluster and its registrations.
	if !r.Shard.OwnsKey(reg.Namespace + "/" + reg.Spec.ClientID) {
		return ctrl.Result{}, nil
	}
	defer r.clientLocks.lock(reg.Namespace + "/" + reg.Spec.ClientID)()
	now := reconciler.Clock(r.Now).Now()
	switch {
	case !reg.DeletionTimestamp.IsZero():
		return ctrl.Result{}, r.finalize(ctx, reg)
	case reg.Status.Granted:
		return r.reconcileGranted(ctx, reg, now)
	case !r.Admission.Checked():
		// The controller just started: the admission policies are compared
		// within moments (and the checker brings every registration back
		// then). Changing nothing meanwhile spares the registrations a
		// condition and an event for a state that was never observed.
		log.V(1).Info("waiting for the first check of the admission policies")
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}

	// The cache may lag behind the API server: the grant this process
	// recorded a moment ago, or the one the leader before it recorded, may
	// not show yet, and granting again would write again a credential the
	// agent may have picked up already. So whether to grant is decided on
	// the registration as the API server has it, and the status that
	// records the decision is written only on that version (optimistic
	// lock): a pass that raced with another writer fails and looks again.
	live := &fleet.ClusterRegistration{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, live); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if live.ResourceVersion != reg.ResourceVersion {
		log.V(1).Info("the cache is behind the API server; going on with the registration as the API server has it",
			"cached", reg.ResourceVersion, "live", live.ResourceVersion)
		reg = live
		switch {
		case !reg.DeletionTimestamp.IsZero():
			return ctrl.Result{}, r.finalize(ctx, reg)
		case reg.Status.Granted:
			return r.reconcileGranted(ctx, reg, now)
		}
	}

	patcher, err := reconciler.NewStatusPatcher(r.Client, reg, statusRules.Owned()...)
	if err != nil {
		return ctrl.Result{}, err
	}
	base := reg.DeepCopy()
	g := &grant{reg: reg, cfg: r.Config.Get(), now: now}
	err = r.phases().Run(ctx, g)
	r.recordCreatedCluster(reg, g)
	out := setStatus(reg, g, err, now)
	if err := patcher.Patch(ctx, reg, reconciler.WithOptimisticLock); err != nil {
		return ctrl.Result{}, errors.Join(out.Err, err)
	}
	granted := out.Kind() == reconciler.KindSucceeded
	changed := base.Status.Granted != reg.Status.Granted || conditionChanged(base, reg)
	if changed {
		r.recordOutcome(reg, g, out)
	}

	switch out.Kind() {
	case reconciler.KindRaced:
		log.V(1).Info("object changed meanwhile or not in the cache yet; retrying", "error", out.Err.Error())
	case reconciler.KindStalled:
		if changed {
			s := out.Stalled()
			log.Info("ClusterRegistration refused", "reason", s.Reason, "message", s.Message)
		}
	case reconciler.KindWaiting:
		// Waits without a retry (approval, admission policies) come back on
		// every change of their Cluster: log them once.
		if w := out.Waiting(); w.RequeueAfter > 0 || conditionChanged(base, reg) {
			log.Info("ClusterRegistration is waiting", "reason", w.Reason, "message", w.Message)
		}
	case reconciler.KindSucceeded:
		where := "status.credential (sealed)"
		if !sealed(reg) {
			where = "Secret " + config.DefaultSystemRegistrationNS + "/" + g.secretName
		}
		log.Info("ClusterRegistration granted", "cluster", reg.Namespace+"/"+g.clusterName,
			"serviceAccount", g.deploymentNamespace+"/"+registration.RequestServiceAccountName(reg.Name), "credential", where)
	}
	if granted && !sealed(reg) {
		// Come back to remove the credential Secret once it had time to be
		// picked up. A sealed credential stays in the registration's
		// status: only the agent that asked can open it, and removing it
		// would be a write.
		return out.Result(r.pickupTimeout())
	}
	return out.Result(0)
}

// reconcileGranted never grants again: it only removes the credential Secret
// and the access to it once the pickup timeout has passed since the grant.
func (r *Reconciler) reconcileGranted(ctx context.Context, reg *fleet.ClusterRegistration, now time.Time) (ctrl.Result, error) {
	if sealed(reg) {
		return ctrl.Result{}, nil
	}
	deadline := pickupDeadline(reg, r.pickupTimeout())
	if now.Before(deadline) {
		return ctrl.Result{RequeueAfter: deadline.Sub(now)}, nil
	}
	removed, err := r.deleteCredential(ctx, reg)
	if err != nil {
		return ctrl.Result{}, err
	}
	if removed {
		ctrl.LoggerFrom(ctx).Info("removed credential Secret after the pickup timeout",
			"secret", config.DefaultSystemRegistrationNS+"/"+credentialSecretName(reg))
		reconciler.Eventf(r.Recorder, reg, nil, corev1.EventTypeNormal, CredentialRemovedEventReason, "Delete",
			"the credential Secret %s/%s and the access to it were removed %s after the grant",
			config.DefaultSystemRegistrationNS, credentialSecretName(reg), r.pickupTimeout())
	}
	return ctrl.Result{}, nil
}

// pickupDeadline is when the credential of a granted registration is
// removed: the pickup timeout after the Granted condition turned true. A
// granted registration without that condition is past its deadline.
func pickupDeadline(reg *fleet.ClusterRegistration, timeout time.Duration) time.Time {
	cond := meta.FindStatusCondition(reg.Status.Conditions, fleet.GrantedCondition)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		return time.Time{}
	}
	return cond.LastTransitionTime.Add(timeout)
}

// deleteCredential deletes the credential Secret and the Role and
// RoleBinding that let the import identity read it (found by their labels,
// whatever they are named: earlier versions named them otherwise). It
// reports whether the Secret was there.
func (r *Reconciler) deleteCredential(ctx context.Context, reg *fleet.ClusterRegistration) (bool, error) {
	removed, err := r.deleteCredentialSecret(ctx, reg)
	if err != nil {
		return false, err
	}
	if err := r.deleteLabelled(ctx, reg, []client.ObjectList{&rbacv1.RoleBindingList{}, &rbacv1.RoleList{}},
		client.InNamespace(config.DefaultSystemRegistrationNS)); err != nil {
		return false, err
	}
	return removed, nil
}

// deleteCredentialSecret deletes the credential Secret of reg if it belongs
// to reg. Secrets are not cached: this reads the API server.
func (r *Reconciler) deleteCredentialSecret(ctx context.Context, reg *fleet.ClusterRegistration) (bool, error) {
	secret, err := r.getCredentialSecret(ctx, reg)
	var someoneElses *reconciler.Waiting
	switch {
	case errors.As(err, &someoneElses) || (err == nil && secret == nil):
		return false, nil
	case err != nil:
		return false, err
	}
	key := client.ObjectKeyFromObject(secret)
	if err := r.Client.Delete(ctx, secret, client.Preconditions{UID: ptr.To(secret.UID)}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return false, fmt.Errorf("deleting credential Secret %s: %w", key, err)
	}
	return true, nil
}

// finalize removes everything made for a registration being deleted, then
// lets it go.
func (r *Reconciler) finalize(ctx context.Context, reg *fleet.ClusterRegistration) error {
	if !controllerutil.ContainsFinalizer(reg, registration.RegistrationFinalizer) {
		return nil
	}
	if err := r.cleanup(ctx, reg); err != nil {
		return err
	}
	controllerutil.RemoveFinalizer(reg, registration.RegistrationFinalizer)
	if err := r.Client.Update(ctx, reg, client.FieldOwner(reconciler.FieldManager)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing finalizer of ClusterRegistration %s/%s: %w", reg.Namespace, reg.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("ClusterRegistration deleted with its request identity and credential")
	return nil
}

// cleanup deletes every object made for reg: the credential Secret (by name,
// Secrets are not cached) and the ServiceAccounts, Roles and RoleBindings
// labelled for it, wherever they live.
func (r *Reconciler) cleanup(ctx context.Context, reg *fleet.ClusterRegistration) error {
	var errs []error
	if _, err := r.deleteCredentialSecret(ctx, reg); err != nil {
		errs = append(errs, err)
	}
	if err := r.deleteLabelled(ctx, reg, []client.ObjectList{&rbacv1.RoleBindingList{}, &rbacv1.RoleList{}, &corev1.ServiceAccountList{}}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// deleteLabelled deletes the objects of the kinds of lists labelled for reg
// (found through the cache's index), limited by opts.
func (r *Reconciler) deleteLabelled(ctx context.Context, reg *fleet.ClusterRegistration, lists []client.ObjectList, opts ...client.ListOption) error {
	log := ctrl.LoggerFrom(ctx)
	var errs []error
	for _, list := range lists {
		if err := r.Client.List(ctx, list, append(opts, client.MatchingFields{generatedIndex: indexKey(reg.Namespace, reg.Name)})...); err != nil {
			errs = append(errs, fmt.Errorf("listing objects of ClusterRegistration %s/%s: %w", reg.Namespace, reg.Name, err))
			continue
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, it := range items {
			obj := it.(client.Object)
			if err := r.Client.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("deleting %s %s/%s: %w", reconciler.KindOf(r.Client.Scheme(), obj), obj.GetNamespace(), obj.GetName(), err))
				continue
			}
			log.V(1).Info("deleted "+reconciler.KindOf(r.Client.Scheme(), obj), "object", obj.GetNamespace()+"/"+obj.GetName())
		}
	}
	return errors.Join(errs...)
}

// recordOutcome records an event for a grant, a refusal or a block, once
// per change of the Granted condition.
func (r *Reconciler) recordOutcome(reg *fleet.ClusterRegistration, g *grant, out reconciler.Outcome) {
	switch out.Kind() {
	case reconciler.KindSucceeded:
		// No event: the Granted condition says the same, and at a
		// thousand clusters registering an event each is a thousand
		// writes more to the upstream API server.
	case reconciler.KindStalled:
		s := out.Stalled()
		reconciler.Eventf(r.Recorder, reg, nil, corev1.EventTypeWarning, s.Reason, "Refuse", "%s", s.Message)
		if g.takenCluster != nil {
			// Whoever looks after the Cluster learns that someone tried.
			reconciler.Eventf(r.Recorder, g.takenCluster, reg, corev1.EventTypeWarning, s.Reason, "Refuse",
				"ClusterRegistration %s/%s (%s) tried to register this cluster again and was refused: %s",
				reg.Namespace, reg.Name, madeWith(reg), s.Message)
		}
	case reconciler.KindWaiting:
		if w := out.Waiting(); w.Event != "" {
			reconciler.Eventf(r.Recorder, reg, nil, w.Event, w.Reason, "Grant", "%s", w.Message)
		}
	}
}

// madeWith names the identity a registration was made with, for events.
func madeWith(reg *fleet.ClusterRegistration) string {
	if t := reg.Labels[fleet.RegistrationTokenLabel]; t != "" {
		return "token " + t
	}
	if ns := reg.Labels[fleet.RecoveryNamespaceLabel]; ns != "" {
		return "recovery identity of " + ns
	}
	return "no token: made by an admin"
}

// recordCreatedCluster reports on a Cluster the grant made which of the
// agent's labels it left out, once, when it made it.
func (r *Reconciler) recordCreatedCluster(reg *fleet.ClusterRegistration, g *grant) {
	if g.createdCluster == nil || len(g.refusedLabels) == 0 {
		return
	}
	reconciler.Eventf(r.Recorder, g.createdCluster, reg, corev1.EventTypeWarning, AgentLabelsRefusedEventReason, "Create",
		"made for ClusterRegistration %s without some of the agent's labels: %s", reg.Name, registration.DescribeRefusedLabels(g.refusedLabels))
}

func conditionChanged(a, b *fleet.ClusterRegistration) bool {
	ca := meta.FindStatusCondition(a.Status.Conditions, fleet.GrantedCondition)
	cb := meta.FindStatusCondition(b.Status.Conditions, fleet.GrantedCondition)
	if ca == nil || cb == nil {
		return ca != cb
	}
	return ca.Status != cb.Status || ca.Reason != cb.Reason || ca.Message != cb.Message
}

func (r *Reconciler) pickupTimeout() time.Duration {
	if r.CredentialPickupTimeout > 0 {
		return r.CredentialPickupTimeout
	}
	return registration.CredentialPickupTimeout
}
