package registration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/clusterns"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// grant is what one grant pass works on and finds, from which the status
// is computed.
type grant struct {
	reg *fleet.ClusterRegistration
	cfg *config.Config
	now time.Time

	// cluster is the registration's Cluster, clusterName its name (set
	// before the Cluster exists).
	cluster             *fleet.Cluster
	clusterName         string
	deploymentNamespace string
	// secret is the credential Secret an earlier pass left (nil: none),
	// for a registration without a key.
	secret     *corev1.Secret
	secretName string
	// sealedCredential is the credential sealed to the registration's key,
	// written into its status with the grant.
	sealedCredential []byte
	sa               *corev1.ServiceAccount
	// labelsNote says which of the agent's labels the Cluster did not get.
	labelsNote string
	// createdCluster is the Cluster this pass created, with the agent
	// labels it refused (an event on the Cluster reports them).
	createdCluster *fleet.Cluster
	refusedLabels  []registration.RefusedLabel
	// takenCluster is the existing Cluster a refused re-registration aimed
	// at (an event on it reports the attempt).
	takenCluster *fleet.Cluster
}

// phases are the steps of a grant, in order. Every phase reads what exists
// and makes only what is missing, so a pass interrupted at any write is
// finished by the next one (shared/SPEC.md §4: a restart at any step
// converges; the restart test kills the controller after each write).
func (r *Reconciler) phases() reconciler.Phases[*grant] {
	return reconciler.Phases[*grant]{
		{Name: stepCluster, Run: r.checkAndFindCluster},
		{Name: stepFinalizer, Run: r.ensureFinalizer},
		{Name: stepNamespace, Run: r.ensureNamespaces},
		// A sealed credential needs no access of its own: it is handed
		// over in the registration's status, which the import identity
		// reads by the registration's unguessable name (controller/token),
		// and only the agent can open it.
		{Name: stepCredentialAccess, Run: r.ensureCredentialAccess, Skip: func(g *grant) bool {
			return g.reg.Labels[fleet.RegistrationTokenLabel] == "" || sealed(g.reg)
		}},
		// Older request identities of the cluster go before the new one is
		// made: the cluster namespace's shared role lets an identity mint
		// tokens for any ServiceAccount there.
		{Name: stepSuperseded, Run: r.supersede},
		{Name: stepRequestIdentity, Run: r.ensureRequestIdentity},
		{Name: stepCredentialSecret, Run: r.ensureCredential},
	}
}

// checkAndFindCluster decides whether the registration may be granted at
// all, and finds or creates its Cluster. A refusal is a *reconciler.Stalled
// (terminal: the agent asks again with a new registration), a block a
// *reconciler.Waiting.
func (r *Reconciler) checkAndFindCluster(ctx context.Context, g *grant) error {
	reg := g.reg
	// The checks below trust what the admission policies enforce (the token
	// label, who may register without a token, who may approve): without
	// them nothing is granted, and nothing is done.
	if problem := r.Admission.Problem(); problem != "" {
		return reconciler.Wait(fleet.AdmissionPoliciesMissingReason, 0,
			"the controller grants no registration while %s", problem).WithEvent(corev1.EventTypeWarning)
	}
	// A refused re-registration is final (finalRefusals).
	if c := meta.FindStatusCondition(reg.Status.Conditions, fleet.GrantedCondition); c != nil && c.Status == metav1.ConditionFalse && slices.Contains(finalRefusals, c.Reason) {
		return reconciler.Stall(c.Reason, "%s", c.Message)
	}
	token, err := r.check(ctx, reg, g.now)
	if err != nil {
		return r.refuse(ctx, reg, err)
	}
	// A registration is stale when another of its clientID was granted and
	// is not older: granting it would revoke a credential an agent uses.
	if succ, err := r.grantedSuccessor(ctx, reg); err != nil {
		return err
	} else if succ != nil {
		if err := r.Client.Delete(ctx, reg, client.Preconditions{UID: ptr.To(reg.UID)}); client.IgnoreNotFound(err) != nil {
			return err
		}
		return reconciler.Stall(fleet.SupersededReason,
			"ClusterRegistration %s of the same clientID was granted and is not older; this one is stale and is removed", succ.Name)
	}

	cluster, clusterName, err := r.findCluster(ctx, reg)
	var wait *reconciler.Waiting
	if errors.As(err, &wait) && wait.Reason == ClusterDeletingReason && reg.Labels[fleet.RecoveryNamespaceLabel] != "" {
		// Deleting the Cluster revokes its agent: its recovery identity
		// does not wait to register a new one.
		return r.refuse(ctx, reg, stall(fleet.RecoveryRefusedReason, "%s; the recovery identity of %s never registers a new Cluster: register this cluster with a ClusterRegistrationToken",
			wait.Message, reg.Labels[fleet.RecoveryNamespaceLabel]))
	}
	if err != nil {
		return err
	}
	if reg.Labels[fleet.RecoveryNamespaceLabel] != "" {
		// Made with a cluster's recovery identity: no token, no limit;
		// that cluster or nothing.
		if err := checkRecovery(reg, cluster); err != nil {
			g.takenCluster = cluster
			return r.refuse(ctx, reg, err)
		}
	} else if token != nil {
		if err := checkReregistration(reg, token, cluster, g.cfg.OfflineAfter(), g.now); err != nil {
			g.takenCluster = cluster
			return r.refuse(ctx, reg, err)
		}
		if err := checkLimit(token, clusterName); err != nil {
			return r.refuse(ctx, reg, err)
		}
		if token.Spec.GetApproval() == fleet.ApprovalManual && reg.Annotations[fleet.ApprovedAnnotation] != "true" {
			return pendingApproval(reg, token)
		}
		if err := r.reserve(ctx, token, clusterName); err != nil {
			return err
		}
	}
	if cluster == nil {
		if cluster, err = r.createCluster(ctx, reg, clusterName, g.cfg); err != nil {
			return err
		}
		g.createdCluster = cluster
		_, g.refusedLabels = registration.ClusterLabels(reg.Spec.ClusterLabels, g.cfg.AgentLabelKeyAllowed, g.cfg.IgnoreClusterRegistrationLabels)
	} else if err := r.recordIdentityKey(ctx, reg, cluster); err != nil {
		return err
	}
	g.cluster, g.clusterName = cluster, cluster.Name
	g.labelsNote = labelsNote(reg, cluster, g.cfg)
	return nil
}

// refuse answers reg with a refusal (a *reconciler.Stalled, or an error
// reading the token): whatever an earlier pass made for it (before its
// token went away, say) goes.
func (r *Reconciler) refuse(ctx context.Context, reg *fleet.ClusterRegistration, refusal error) error {
	var stalled *reconciler.Stalled
	if !errors.As(refusal, &stalled) {
		return refusal
	}
	if err := r.cleanup(ctx, reg); err != nil {
		return err
	}
	return refusal
}

// check validates the registration and the token it claims, and returns
// that token; a refusal is a *reconciler.Stalled. A registration without
// the registration-token label was made by an admin: the admission policy
// lets only users allowed the "register" verb create one (and requires the
// label from import identities), so it is not checked against a token.
func (r *Reconciler) check(ctx context.Context, reg *fleet.ClusterRegistration, now time.Time) (*fleet.ClusterRegistrationToken, error) {
	if err := checkRegistration(reg); err != nil {
		return nil, err
	}
	name := reg.Labels[fleet.RegistrationTokenLabel]
	if name == "" {
		return nil, nil
	}
	token := &fleet.ClusterRegistrationToken{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: reg.Namespace, Name: name}, token); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading ClusterRegistrationToken %s/%s: %w", reg.Namespace, name, err)
		}
		token = nil
	}
	if err := checkToken(reg, name, token, now); err != nil {
		return nil, err
	}
	return token, nil
}

// reserve records clusterName in the token's status.registeredClusters
// when the token limits its clusters, before anything is made for it: the
// place is taken even if the grant never finishes, so no crash lets more
// clusters through than the limit. The patch carries the resourceVersion
// read, so two grants through one token cannot both take the last place.
func (r *Reconciler) reserve(ctx context.Context, token *fleet.ClusterRegistrationToken, clusterName string) error {
	if token.Spec.MaxClusters == nil || slices.Contains(token.Status.RegisteredClusters, clusterName) {
		return nil
	}
	base := token.DeepCopy()
	token.Status.RegisteredClusters = append(token.Status.RegisteredClusters, clusterName)
	slices.Sort(token.Status.RegisteredClusters)
	patch := client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, token, patch, client.FieldOwner(reconciler.FieldManager)); err != nil {
		return fmt.Errorf("recording Cluster %s in status.registeredClusters of ClusterRegistrationToken %s/%s: %w", clusterName, token.Namespace, token.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("counted a cluster against the token's limit", "token", token.Namespace+"/"+token.Name,
		"cluster", clusterName, "registered", len(token.Status.RegisteredClusters), "maxClusters", *token.Spec.MaxClusters)
	return nil
}

// findCluster finds the Cluster of the registration's clientID in its
// workspace. It returns nil and the name cluster-<hash> to create when there
// is none.
func (r *Reconciler) findCluster(ctx context.Context, reg *fleet.ClusterRegistration) (*fleet.Cluster, string, error) {
	list := &fleet.ClusterList{}
	if err := r.Client.List(ctx, list, client.InNamespace(reg.Namespace), client.MatchingFields{clusterClientIDIndex: reg.Spec.ClientID}); err != nil {
		return nil, "", fmt.Errorf("listing Clusters with clientID %q in %s: %w", reg.Spec.ClientID, reg.Namespace, err)
	}
	switch len(list.Items) {
	case 0:
	case 1:
		c, err := usableCluster(&list.Items[0])
		if err != nil {
			return nil, "", err
		}
		return c, c.Name, nil
	default:
		found := make([]string, 0, len(list.Items))
		for _, c := range list.Items {
			found = append(found, c.Name)
		}
		slices.Sort(found)
		return nil, "", reconciler.Wait(DuplicateClientIDReason, 0,
			"Clusters %s in %s all have spec.clientID %q, so the registration cannot tell which cluster it is: give each Cluster its own clientID",
			strings.Join(found, ", "), reg.Namespace, reg.Spec.ClientID).WithEvent(corev1.EventTypeWarning)
	}

	name := names.AutoClusterName(reg.Spec.ClientID)
	cluster := &fleet.Cluster{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: reg.Namespace, Name: name}, cluster)
	switch {
	case err == nil && cluster.Spec.ClientID == reg.Spec.ClientID:
		c, err := usableCluster(cluster)
		if err != nil {
			return nil, "", err
		}
		return c, name, nil
	case err == nil:
		return nil, "", reconciler.Wait(ClusterNameTakenReason, 0,
			"Cluster %s/%s, the name made for clientID %q, exists with spec.clientID %q: set spec.clientID of the Cluster meant for this agent to %q, or rename or delete %s",
			reg.Namespace, name, reg.Spec.ClientID, cluster.Spec.ClientID, reg.Spec.ClientID, name).WithEvent(corev1.EventTypeWarning)
	case !apierrors.IsNotFound(err):
		return nil, "", fmt.Errorf("reading Cluster %s/%s: %w", reg.Namespace, name, err)
	}
	return nil, name, nil
}

// createCluster creates the Cluster cluster-<hash> for a new agent, with
// the agent's labels that the configuration lets through.
func (r *Reconciler) createCluster(ctx context.Context, reg *fleet.ClusterRegistration, name string, cfg *config.Config) (*fleet.Cluster, error) {
	cluster := &fleet.Cluster{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: reg.Namespace,
			Name:      name,
			Labels:    registration.NewClusterLabels(reg.Spec.ClusterLabels, name, cfg.AgentLabelKeyAllowed, cfg.IgnoreClusterRegistrationLabels),
			// The Cluster reconciler's finalizer, set now: one write less.
			Finalizers: []string{fleet.ClusterFinalizer},
		},
		Spec: fleet.ClusterSpec{ClientID: reg.Spec.ClientID},
	}
	if registration.Signed(reg) {
		// The key the Cluster is granted to, recorded with it: no write
		// of its own.
		cluster.Annotations = map[string]string{fleet.AgentIdentityKeyAnnotation: reg.Spec.IdentityPublicKey}
	}
	if err := r.Client.Create(ctx, cluster, client.FieldOwner(reconciler.FieldManager)); err != nil {
		return nil, fmt.Errorf("creating Cluster %s/%s: %w", reg.Namespace, name, err)
	}
	ctrl.LoggerFrom(ctx).Info("created Cluster for a new agent", "cluster", reg.Namespace+"/"+name)
	return cluster, nil
}

// recordIdentityKey records the identity key of a signed registration that
// is about to be granted on its existing Cluster, when the Cluster records
// another key or none (one write): from now on re-registrations through a
// token not bound to the Cluster, and its recovery identity, must be signed
// with it. The registration passed every check, so it is the Cluster's to
// take. Written before the request identity is made, so a retried pass finds
// its own key recorded.
func (r *Reconciler) recordIdentityKey(ctx context.Context, reg *fleet.ClusterRegistration, cluster *fleet.Cluster) error {
	key := reg.Spec.IdentityPublicKey
	if !registration.Signed(reg) || registration.SameIdentityKey(cluster.Annotations[fleet.AgentIdentityKeyAnnotation], key) {
		return nil
	}
	before := cluster.Annotations[fleet.AgentIdentityKeyAnnotation]
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, fleet.AgentIdentityKeyAnnotation, key))
	if err := r.Client.Patch(ctx, cluster, patch, client.FieldOwner(reconciler.FieldManager)); err != nil {
		return fmt.Errorf("recording the agent's identity key on Cluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	log := ctrl.LoggerFrom(ctx)
	if before == "" {
		log.Info("recorded the agent's identity key on the Cluster", "cluster", cluster.Namespace+"/"+cluster.Name, "key", registration.IdentityFingerprint(key))
	} else {
		log.Info("the Cluster is registered to another identity key now", "cluster", cluster.Namespace+"/"+cluster.Name,
			"key", registration.IdentityFingerprint(key), "previousKey", registration.IdentityFingerprint(before))
	}
	return nil
}

func usableCluster(c *fleet.Cluster) (*fleet.Cluster, error) {
	if !c.DeletionTimestamp.IsZero() {
		// Its deletion removes this registration too, or, failing that,
		// brings it back here through the Cluster watch.
		return nil, reconciler.Wait(ClusterDeletingReason, 0, "Cluster %s/%s is being deleted; register again once it is gone", c.Namespace, c.Name)
	}
	return c, nil
}

// ensureFinalizer sets the registration's finalizer before anything is
// made for it. Agents set it when they create the registration, so this
// writes only for registrations made otherwise (older agents, admins).
// Deleting the Cluster deletes its registrations (the Cluster reconciler,
// by clientID), so no owner reference is written.
func (r *Reconciler) ensureFinalizer(ctx context.Context, g *grant) error {
	reg := g.reg
	if !controllerutil.AddFinalizer(reg, registration.RegistrationFinalizer) {
		return nil
	}
	if err := r.Client.Update(ctx, reg, client.FieldOwner(reconciler.FieldManager)); err != nil {
		return fmt.Errorf("adding the finalizer of ClusterRegistration %s/%s: %w", reg.Namespace, reg.Name, err)
	}
	return nil
}

// ensureNamespaces makes the cluster namespace and, for a credential in a
// Secret, the system registration namespace, and reads the credential
// Secret an earlier pass may have left.
func (r *Reconciler) ensureNamespaces(ctx context.Context, g *grant) error {
	g.deploymentNamespace = names.ClusterNamespace(g.reg.Namespace, g.clusterName)
	if err := clusterns.Ensure(ctx, r.Client, r.APIReader, names.NewClusterNamespace(g.reg.Namespace, g.clusterName)); err != nil {
		return err
	}
	if sealed(g.reg) {
		return nil
	}
	// Access to the credential Secret comes first, so the agent's watch on
	// it starts as early as possible.
	g.secretName = credentialSecretName(g.reg)
	if err := clusterns.Ensure(ctx, r.Client, r.APIReader, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: config.DefaultSystemRegistrationNS}}); err != nil {
		return err
	}
	secret, err := r.getCredentialSecret(ctx, g.reg)
	g.secret = secret
	return err
}

// getCredentialSecret reads the credential Secret (from the API server:
// Secrets are not cached). It returns nil when there is none, and a
// conflict when a Secret of that name belongs to another registration: then
// no one gets access to it through this registration.
func (r *Reconciler) getCredentialSecret(ctx context.Context, reg *fleet.ClusterRegistration) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: config.DefaultSystemRegistrationNS, Name: credentialSecretName(reg)}
	if err := r.Client.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading credential Secret %s: %w", key, err)
	}
	if !ownedBy(secret, reg) {
		return nil, conflict("Secret", key.String())
	}
	return secret, nil
}

// ensureCredentialAccess lets the import identity of the registration's
// token read (get, or list and watch with a metadata.name field selector)
// and delete the one credential Secret of this registration.
func (r *Reconciler) ensureCredentialAccess(ctx context.Context, g *grant) error {
	reg := g.reg
	name := credentialRoleName(reg)
	if err := r.ensure(ctx, reg, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: config.DefaultSystemRegistrationNS, Name: name},
		Rules: []rbacv1.PolicyRule{{
			APIGroups:     []string{""},
			Resources:     []string{"secrets"},
			ResourceNames: []string{credentialSecretName(reg)},
			Verbs:         []string{"get", "list", "watch", "delete"},
		}},
	}); err != nil {
		return err
	}
	return r.ensureBinding(ctx, reg, config.DefaultSystemRegistrationNS, name, rbacv1.Subject{
		Kind: rbacv1.ServiceAccountKind, Namespace: reg.Namespace, Name: registration.ImportServiceAccountName(reg.Labels[fleet.RegistrationTokenLabel]),
	})
}

// ensureRequestIdentity makes the request ServiceAccount in the cluster
// namespace and its RBAC: the cluster's BundleDeployments (and the Secrets
// holding their contents) in the cluster namespace, tokens for itself (the
// shared ClusterRole registration.RequestIdentityClusterRole), and its own
// Cluster's status in the workspace. Nothing more. The three are made side
// by side (a grant waits for the round trips of two objects, not of four);
// only the workspace RoleBinding waits for its Role: the controller may not
// bind a role it does not hold (no "bind" verb), so the API server checks
// the Role's rules, which must exist.
func (r *Reconciler) ensureRequestIdentity(ctx context.Context, g *grant) error {
	reg, clusterName, clusterNS := g.reg, g.clusterName, g.deploymentNamespace
	name := registration.RequestServiceAccountName(reg.Name)
	sa := &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Namespace: clusterNS, Name: name, Annotations: map[string]string{
			fleet.ClusterRegistrationAnnotation:          reg.Name,
			fleet.ClusterRegistrationNamespaceAnnotation: reg.Namespace,
			fleet.ClusterAnnotation:                      clusterName,
		}},
		AutomountServiceAccountToken: ptr.To(false),
	}
	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: clusterNS, Name: name}
	// Each goes on when another fails: what a pass stopped by an object in
	// the way made is there for the next one.
	var eg errgroup.Group
	eg.Go(func() error { return r.ensure(ctx, reg, sa) })
	// In the cluster namespace: one binding to the shared ClusterRole
	// (kustomize/base/rbac), no Role of its own.
	eg.Go(func() error {
		return r.ensure(ctx, reg, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: clusterNS, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: registration.RequestIdentityClusterRole},
			Subjects:   []rbacv1.Subject{subject},
		})
	})
	eg.Go(func() error {
		if err := r.ensure(ctx, reg, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: reg.Namespace, Name: name}, Rules: workspaceRules(clusterName)}); err != nil {
			return err
		}
		return r.ensureBinding(ctx, reg, reg.Namespace, name, subject)
	})
	if err := eg.Wait(); err != nil {
		return err
	}
	g.sa = sa
	return nil
}

// workspaceRules is what the request identity may do in the workspace: read
// its own Cluster, write its status, and hold its tunnel.
func workspaceRules(cluster string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"clusters"}, ResourceNames: []string{cluster}, Verbs: []string{"get"}},
		{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"clusters/status"}, ResourceNames: []string{cluster}, Verbs: []string{"get", "patch", "update"}},
		// The agent's tunnel (docs/design/cluster-access.md): the upstream API
		// server lets the WebSocket to the aggregated proxy API through
		// only with this right; fleet-proxy then maps the identity to this
		// Cluster itself and refuses any other. Only its own Cluster.
		// And the revoked direct tokens of its cluster (authorized cluster
		// endpoint), by the same mapping.
		{APIGroups: []string{registration.ProxyAPIGroup}, Resources: []string{"clusters/attach", "clusters/revocations"}, ResourceNames: []string{cluster}, Verbs: []string{"get"}},
	}
}

// ensureBinding binds the Role of the same name to subject.
func (r *Reconciler) ensureBinding(ctx context.Context, reg *fleet.ClusterRegistration, namespace, name string, subject rbacv1.Subject) error {
	return r.ensure(ctx, reg, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	})
}

// ensure makes obj as it is given, labelled for reg (reconciler.Objects:
// never written when unchanged; an object of that name made for something
// else is left alone and reported).
func (r *Reconciler) ensure(ctx context.Context, reg *fleet.ClusterRegistration, obj client.Object, opts ...reconciler.EnsureOption) error {
	r.objectsOnce.Do(func() {
		if r.objects == nil { // a Reconciler not set up with a manager (tests)
			r.objects = reconciler.NewObjects(r.Client, r.APIReader)
		}
	})
	_, err := r.objects.Ensure(ctx, owner{reg: reg, scheme: r.Client.Scheme()}, obj, opts...)
	return err
}

// owner makes and recognises the objects made for one registration: they
// carry its name and namespace as labels (they live in other namespaces
// than the registration, so owner references cannot say it).
type owner struct {
	reg    *fleet.ClusterRegistration
	scheme *runtime.Scheme
}

func (o owner) Own(obj client.Object) error {
	label(o.reg, obj)
	return nil
}

func (o owner) Check(obj client.Object) error {
	kind, key := reconciler.KindOf(o.scheme, obj), client.ObjectKeyFromObject(obj).String()
	if !ownedBy(obj, o.reg) {
		return conflict(kind, key)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return reconciler.Wait(fleet.WaitingReason, reconciler.CacheLagRetry, "%s %s is being deleted; waiting to create it again", kind, key)
	}
	return nil
}

func conflict(kind, key string) error {
	return reconciler.Wait(ObjectConflictReason, reconciler.ConflictRetry,
		"%s %s exists and was not made for this registration: delete it so the registration can be granted", kind, key).WithEvent(corev1.EventTypeWarning)
}

// grantedSuccessor returns a granted registration of reg's clientID that is
// newer than reg (olderThan: creation time, then the agent's request time,
// then granted first), if there is one: reg is then a stale request, and
// granting it would revoke the credential of the newer one.
func (r *Reconciler) grantedSuccessor(ctx context.Context, reg *fleet.ClusterRegistration) (*fleet.ClusterRegistration, error) {
	list := &fleet.ClusterRegistrationList{}
	if err := r.Client.List(ctx, list, client.InNamespace(reg.Namespace), client.MatchingFields{registrationClientIDIndex: reg.Spec.ClientID}); err != nil {
		return nil, fmt.Errorf("listing ClusterRegistrations with clientID %q in %s: %w", reg.Spec.ClientID, reg.Namespace, err)
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID != reg.UID && o.Status.Granted && o.DeletionTimestamp.IsZero() && olderThan(reg, o) {
			return o, nil
		}
	}
	return nil, nil
}

// supersede deletes every other registration of the same clientID in the
// workspace that is older than reg, granted or not; their finalizers remove
// what was made for them (so their request tokens stop working at once).
func (r *Reconciler) supersede(ctx context.Context, g *grant) error {
	reg := g.reg
	list := &fleet.ClusterRegistrationList{}
	if err := r.Client.List(ctx, list, client.InNamespace(reg.Namespace), client.MatchingFields{registrationClientIDIndex: reg.Spec.ClientID}); err != nil {
		return fmt.Errorf("listing ClusterRegistrations with clientID %q in %s: %w", reg.Spec.ClientID, reg.Namespace, err)
	}
	var errs []error
	for i := range list.Items {
		old := &list.Items[i]
		if old.UID == reg.UID || !old.DeletionTimestamp.IsZero() || !olderThan(old, reg) {
			continue
		}
		if err := r.Client.Delete(ctx, old, client.Preconditions{UID: ptr.To(old.UID)}); err != nil {
			if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("deleting superseded ClusterRegistration %s/%s: %w", old.Namespace, old.Name, err))
			}
			continue
		}
		// What was made for it goes now, not when its finalizer runs: its
		// request identity must be gone before the new one is made.
		if err := r.cleanup(ctx, old); err != nil {
			errs = append(errs, err)
		}
		ctrl.LoggerFrom(ctx).Info("deleted superseded ClusterRegistration", "superseded", old.Namespace+"/"+old.Name)
		reconciler.Eventf(r.Recorder, old, nil, corev1.EventTypeNormal, fleet.SupersededReason, "Delete", "superseded by ClusterRegistration %s of the same clientID", reg.Name)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return r.checkNoOtherRequestIdentity(ctx, g)
}

// checkNoOtherRequestIdentity makes sure, reading the API server, that the
// cluster namespace holds no request identity of another registration
// (one the cache did not show yet when supersede cleaned up): the new one
// is made only then. One still there is deleted and the pass waits.
func (r *Reconciler) checkNoOtherRequestIdentity(ctx context.Context, g *grant) error {
	list := &corev1.ServiceAccountList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(g.deploymentNamespace), client.HasLabels{registration.RegistrationLabel}); err != nil {
		return fmt.Errorf("listing the request identities in %s: %w", g.deploymentNamespace, err)
	}
	for i := range list.Items {
		sa := &list.Items[i]
		if sa.Labels[registration.RegistrationLabel] == g.reg.Name && sa.Labels[registration.RegistrationNamespaceLabel] == g.reg.Namespace {
			continue
		}
		if err := r.Client.Delete(ctx, sa, client.Preconditions{UID: ptr.To(sa.UID)}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting the earlier request identity %s/%s: %w", sa.Namespace, sa.Name, err)
		}
		return reconciler.Wait(fleet.WaitingReason, reconciler.CacheLagRetry,
			"deleted the earlier request identity %s/%s of this cluster; making the new one once it is gone", sa.Namespace, sa.Name)
	}
	return nil
}

// ensureCredential makes the credential: a fresh bearer token of the
// request ServiceAccount and where the agent's cluster lives. For a
// registration with a key it is sealed to that key and written into the
// registration's status with the grant, in one write that carries the
// version of the registration the grant was decided on: a pass stopped
// before it leaves nothing behind (the token it minted was never shown to
// anyone), and two passes cannot both hand one over. Without a key it is
// written in the clear into the credential Secret.
func (r *Reconciler) ensureCredential(ctx context.Context, g *grant) error {
	if !sealed(g.reg) {
		return r.ensureCredentialSecret(ctx, g)
	}
	cred, err := r.mintCredential(ctx, g)
	if err != nil {
		return err
	}
	pub, err := registration.ParseCredentialPublicKey(g.reg.Spec.CredentialPublicKey)
	if err != nil {
		return err // checked before anything was made; not reached
	}
	box, err := registration.Seal(pub, *cred, g.reg.Namespace, g.reg.Name, string(g.reg.UID))
	if err != nil {
		return fmt.Errorf("sealing the credential of ClusterRegistration %s/%s: %w", g.reg.Namespace, g.reg.Name, err)
	}
	g.sealedCredential = box
	return nil
}

// mintCredential requests a token for the request ServiceAccount.
func (r *Reconciler) mintCredential(ctx context.Context, g *grant) (*registration.SealedCredential, error) {
	reg, sa := g.reg, g.sa
	tr, err := r.Clientset.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(g.cfg.GetRequestCredentialTTL() / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	expires := tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339)
	ctrl.LoggerFrom(ctx).V(1).Info("minted request token", "serviceAccount", sa.Namespace+"/"+sa.Name, "tokenExpires", expires)
	return &registration.SealedCredential{
		Token:               tr.Status.Token,
		ClusterNamespace:    reg.Namespace,
		ClusterName:         g.clusterName,
		DeploymentNamespace: sa.Namespace,
		ServiceAccount:      sa.Name,
		Expires:             expires,
	}, nil
}

// ensureCredentialSecret writes the credential Secret of a registration
// without a key, in the clear. A Secret written by an interrupted earlier
// pass is kept as it is when its token still authenticates (same
// ServiceAccount UID, not near expiry).
func (r *Reconciler) ensureCredentialSecret(ctx context.Context, g *grant) error {
	reg, sa := g.reg, g.sa
	if reusable(g.secret, sa, g.now) {
		return nil
	}
	cred, err := r.mintCredential(ctx, g)
	if err != nil {
		return err
	}
	data := cred.SecretData()
	// Written only over what the pass found: the Secret it replaces, or
	// none. Another pass's Secret (of a controller that ran at the same
	// time) is not overwritten with another token: this pass fails and the
	// next one reuses it.
	var seen types.UID
	if g.secret != nil {
		seen = g.secret.UID
	}
	return r.ensure(ctx, reg, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: config.DefaultSystemRegistrationNS,
			Name:      credentialSecretName(reg),
			Labels:    map[string]string{fleet.ClusterLabel: g.clusterName},
			Annotations: map[string]string{
				ServiceAccountUIDAnnotation: string(sa.UID),
				TokenExpiresAnnotation:      cred.Expires,
			},
		},
		Type: registration.CredentialSecretType,
		Data: data,
	}, reconciler.ExpectUID(seen))
}

// sealed says whether reg is answered with a sealed credential.
func sealed(reg *fleet.ClusterRegistration) bool { return reg.Spec.CredentialPublicKey != "" }

// reusable says whether the credential Secret an earlier pass left holds a
// token minted for sa that is good for a while longer.
func reusable(secret *corev1.Secret, sa *corev1.ServiceAccount, now time.Time) bool {
	if secret == nil || secret.Annotations[ServiceAccountUIDAnnotation] != string(sa.UID) {
		return false
	}
	if len(secret.Data[registration.KeyToken]) == 0 {
		return false
	}
	expires, err := time.Parse(time.RFC3339, secret.Annotations[TokenExpiresAnnotation])
	if err != nil {
		// Written by an earlier version: the expiry is in the data.
		expires, err = time.Parse(time.RFC3339, string(secret.Data[registration.KeyExpires]))
	}
	return err == nil && expires.Sub(now) >= 10*time.Minute
}
