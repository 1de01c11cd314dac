package registration

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// InvalidNameReason: the registration's name cannot label the objects made
// for it.
const InvalidNameReason = "InvalidName"

// InvalidCredentialKeyReason: spec.credentialPublicKey is no key the
// credential can be sealed to.
const InvalidCredentialKeyReason = "InvalidCredentialKey"

// InvalidIdentitySignatureReason: the registration claims an identity key
// but its signature does not verify, or its signed request time is too far
// from its creation (a replay).
const InvalidIdentitySignatureReason = "InvalidIdentitySignature"

// reinstall tells a person how to recover from a refused token.
const reinstall = "create a new ClusterRegistrationToken and reinstall the agent with its values (helm upgrade --install fleet-agent charts/fleet-agent -f values.yaml)"

// checkRegistration refuses a registration whose identity signature does
// not verify (checked first: nothing else is trusted of a registration that
// claims a key it does not hold), whose name is not a valid label value
// (every object made for it is labelled with its name), whose credential
// key is malformed, or, made with a recovery identity, that is not signed or
// not sealed.
func checkRegistration(reg *fleet.ClusterRegistration) *reconciler.Stalled {
	if registration.Signed(reg) {
		if err := registration.VerifyRegistration(reg); err != nil {
			return stall(InvalidIdentitySignatureReason,
				"%v; a registration with an identity signature that does not verify is never granted: the agent registers again with a new, signed registration", err)
		}
	}
	if errs := validation.IsValidLabelValue(reg.Name); len(errs) > 0 {
		return stall(InvalidNameReason,
			"the name %q cannot label the objects made for this registration (%s): create it with a name of at most 63 characters, or with generateName: request-", reg.Name, strings.Join(errs, "; "))
	}
	if k := reg.Spec.CredentialPublicKey; k != "" {
		if _, err := registration.ParseCredentialPublicKey(k); err != nil {
			return stall(InvalidCredentialKeyReason, "%v: the agent must send the base64 of a 32-byte X25519 public key; register again with an agent of this version", err)
		}
	}
	if ns := reg.Labels[fleet.RecoveryNamespaceLabel]; ns != "" {
		switch {
		case reg.Labels[fleet.RegistrationTokenLabel] != "":
			return stall(fleet.RecoveryRefusedReason, "a registration made with the recovery identity of %s carries no label %s: it is checked against its cluster, not a token", ns, fleet.RegistrationTokenLabel)
		case !registration.Signed(reg) || !sealed(reg):
			return stall(fleet.RecoveryRefusedReason,
				"a registration made with the recovery identity of %s must be signed with the cluster's identity key (spec.identityPublicKey, spec.identitySignature) and carry spec.credentialPublicKey, as agents of this version make it", ns)
		}
	}
	return nil
}

// stall is a refusal: a terminal answer to a registration, which gets no
// credential and is not retried; its status says why and what to do.
func stall(reason, format string, args ...any) *reconciler.Stalled {
	return &reconciler.Stalled{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// checkToken decides whether the token a registration names lets it
// register; token is nil when it does not exist. A nil result means yes.
func checkToken(reg *fleet.ClusterRegistration, name string, token *fleet.ClusterRegistrationToken, now time.Time) *reconciler.Stalled {
	ref := reg.Namespace + "/" + name
	if token == nil {
		return stall(fleet.TokenNotFoundReason,
			"ClusterRegistrationToken %s does not exist (it was deleted or it expired), so this registration gets no credential: %s", ref, reinstall)
	}
	if !token.DeletionTimestamp.IsZero() {
		return stall(fleet.TokenNotFoundReason,
			"ClusterRegistrationToken %s is being deleted, so this registration gets no credential: %s", ref, reinstall)
	}
	if expires, ok := tokenExpires(token); ok && !now.Before(expires) {
		return stall(fleet.TokenExpiredReason,
			"ClusterRegistrationToken %s expired at %s, so this registration gets no credential: %s", ref, expires.UTC().Format(time.RFC3339), reinstall)
	}
	if token.Spec.ClientID != "" && token.Spec.ClientID != reg.Spec.ClientID {
		return stall(fleet.ClientIDNotAllowedReason,
			"ClusterRegistrationToken %s may only register clientID %q, not %q: install the agent with --set clientID=%s, or register this cluster with a token made for it",
			ref, token.Spec.ClientID, reg.Spec.ClientID, token.Spec.ClientID)
	}
	return nil
}

// tokenExpires is when a token expires: its status, or, before the token
// controller wrote that, its creation plus its TTL.
func tokenExpires(token *fleet.ClusterRegistrationToken) (time.Time, bool) {
	if token.Status.Expires != nil {
		return token.Status.Expires.Time, true
	}
	if token.Spec.TTL != nil && token.Spec.TTL.Duration > 0 {
		return token.CreationTimestamp.Add(token.Spec.TTL.Duration), true
	}
	return time.Time{}, false
}

// finalRefusals are the refusals a later pass never turns into a grant:
// waiting for the Cluster to go offline, or for its recorded key to change,
// must not turn an attacker's pending request into a grant. The agent
// registers again with a new registration.
var finalRefusals = []string{fleet.ReregistrationRefusedReason, fleet.RecoveryRefusedReason, fleet.ClusterAlreadyRegisteredReason}

// recoverWith tells a person how to register a cluster whose agent cannot
// prove the key recorded for it.
func recoverWith(ws, clientID string) string {
	return fmt.Sprintf("register it again with a token bound to it: create a ClusterRegistrationToken with spec.clientID: %q in %s and reinstall the agent with its values, "+
		"or use a token with spec.approval: Manual and approve the registration (docs/operations.md \"Recovering a cluster\")", clientID, ws)
}

// checkReregistration decides whether a registration through token may
// register cluster, which exists: only through a token bound to its
// clientID (checkToken refused a token bound to another one), with a
// signature by the identity key recorded on the Cluster (checkRegistration
// verified it), through a token asking for approval (the approval is
// waited for later), or, once, for a Cluster registered by an agent before
// agents had a key: no key recorded, and its agent offline for longer than
// offlineAfter (the rule of earlier releases). A generic token creates new
// Clusters only. A nil result means allowed.
func checkReregistration(reg *fleet.ClusterRegistration, token *fleet.ClusterRegistrationToken, cluster *fleet.Cluster, offlineAfter time.Duration, now time.Time) *reconciler.Stalled {
	if cluster == nil || token == nil || token.Spec.ClientID != "" {
		return nil
	}
	recorded := cluster.Annotations[fleet.AgentIdentityKeyAnnotation]
	if recorded != "" && registration.Signed(reg) && registration.SameIdentityKey(reg.Spec.IdentityPublicKey, recorded) {
		return nil
	}
	if token.Spec.GetApproval() == fleet.ApprovalManual {
		return nil
	}
	last := cluster.Status.Agent.LastSeen
	offline := !last.IsZero() && now.Sub(last.Time) > offlineAfter
	if recorded == "" && offline {
		return nil
	}
	ref := fmt.Sprintf("Cluster %s/%s (clientID %q)", cluster.Namespace, cluster.Name, reg.Spec.ClientID)
	tok := fmt.Sprintf("ClusterRegistrationToken %s/%s is not bound to its clientID", token.Namespace, token.Name)
	switch {
	case recorded != "":
		signed := "is not signed"
		if registration.Signed(reg) {
			signed = "is signed by another key, " + registration.IdentityFingerprint(reg.Spec.IdentityPublicKey)
		}
		return stall(fleet.ReregistrationRefusedReason,
			"%s is registered to an agent holding identity key %s; this registration %s, and %s. If this cluster's agent lost its key (its Secret %s was deleted), %s",
			ref, registration.IdentityFingerprint(recorded), signed, tok, registration.IdentitySecretName, recoverWith(reg.Namespace, reg.Spec.ClientID))
	case last.IsZero():
		return stall(fleet.ReregistrationRefusedReason,
			"%s exists and no agent ever registered it (it was made by an admin), and %s: a token not bound to a Cluster's clientID only creates new Clusters. To register this cluster, %s",
			ref, tok, recoverWith(reg.Namespace, reg.Spec.ClientID))
	default:
		return stall(fleet.ReregistrationRefusedReason,
			"%s was registered by an agent of an earlier release, which checked in %s ago, and records no identity key; %s, so it may not take the cluster over while that agent is online. "+
				"To re-register it now, %s; an agent of this release records its key with its first heartbeat, and until then may register again once the Cluster is offline (no check-in for %s)",
			ref, now.Sub(last.Time).Round(time.Second), tok, recoverWith(reg.Namespace, reg.Spec.ClientID), offlineAfter)
	}
}

// checkRecovery decides whether a registration made with the recovery
// identity of a cluster namespace may register cluster (nil: none has its
// clientID): only the Cluster of that namespace, of the registration's
// clientID, with a key recorded that signed it. A recovery identity never
// creates a Cluster. A nil result means allowed.
func checkRecovery(reg *fleet.ClusterRegistration, cluster *fleet.Cluster) *reconciler.Stalled {
	ns := reg.Labels[fleet.RecoveryNamespaceLabel]
	who := "the recovery identity of cluster namespace " + ns
	if cluster == nil {
		return stall(fleet.RecoveryRefusedReason,
			"no Cluster in %s has clientID %q, and %s registers only the existing cluster it was made for: it never creates one. Register a new cluster with a ClusterRegistrationToken",
			reg.Namespace, reg.Spec.ClientID, who)
	}
	if own := names.ClusterNamespace(cluster.Namespace, cluster.Name); own != ns {
		return stall(fleet.RecoveryRefusedReason,
			"Cluster %s/%s of clientID %q has cluster namespace %s, and %s registers only the Cluster of its own namespace",
			cluster.Namespace, cluster.Name, reg.Spec.ClientID, own, who)
	}
	recorded := cluster.Annotations[fleet.AgentIdentityKeyAnnotation]
	if recorded == "" || !registration.SameIdentityKey(reg.Spec.IdentityPublicKey, recorded) {
		have := "no identity key is recorded for it"
		if recorded != "" {
			have = "it is registered to an agent holding identity key " + registration.IdentityFingerprint(recorded)
		}
		return stall(fleet.RecoveryRefusedReason,
			"this registration of Cluster %s/%s is signed by identity key %s, but %s. If this cluster's agent lost its key (its Secret %s was deleted), %s",
			cluster.Namespace, cluster.Name, registration.IdentityFingerprint(reg.Spec.IdentityPublicKey), have, registration.IdentitySecretName,
			recoverWith(reg.Namespace, reg.Spec.ClientID))
	}
	return nil
}

// checkLimit refuses a registration that would register one cluster more
// than the token's spec.maxClusters.
func checkLimit(token *fleet.ClusterRegistrationToken, clusterName string) *reconciler.Stalled {
	if token.Spec.MaxClusters == nil || slices.Contains(token.Status.RegisteredClusters, clusterName) {
		return nil
	}
	limit := int(*token.Spec.MaxClusters)
	if len(token.Status.RegisteredClusters) < limit {
		return nil
	}
	return stall(fleet.TokenLimitReachedReason,
		"ClusterRegistrationToken %s/%s may register %d clusters and has registered %d (status.registeredClusters), so it may not register Cluster %s: raise spec.maxClusters of the token, or register this cluster with another token",
		token.Namespace, token.Name, limit, len(token.Status.RegisteredClusters), clusterName)
}

// pendingApproval is the wait of a registration through a token with
// spec.approval Manual that nobody approved yet. Approving it (an update)
// brings it back; nothing else needs to.
func pendingApproval(reg *fleet.ClusterRegistration, token *fleet.ClusterRegistrationToken) *reconciler.Waiting {
	labels := "none"
	if len(reg.Spec.ClusterLabels) > 0 {
		keys := slices.Sorted(maps.Keys(reg.Spec.ClusterLabels))
		if len(keys) > 10 {
			keys = append(keys[:10], fmt.Sprintf("and %d more", len(keys)-10))
		}
		labels = strings.Join(keys, ", ")
	}
	return reconciler.Wait(fleet.PendingApprovalReason, 0,
		"ClusterRegistrationToken %s/%s asks for approval (spec.approval: Manual): check that clientID %q and the agent's labels (%s) are the cluster you expect, then approve with "+
			"kubectl -n %s annotate clusterregistrations.fleet.cattle.io %s %s=true (needs the approve verb on clusterregistrations, see ClusterRole fleet-registration-approver). "+
			"An agent waiting longer than its registration timeout asks again with a new registration: approve the newest one of its clientID",
		token.Namespace, token.Name, reg.Spec.ClientID, labels, reg.Namespace, reg.Name, fleet.ApprovedAnnotation).WithEvent(corev1.EventTypeNormal)
}

// labelsNote says which of the agent's labels the registration's Cluster
// did not get: those refused when it was made for this registration (made
// after the registration, under the name made for the clientID), or all of
// them when the Cluster existed before (labels of an existing Cluster are
// never changed). Recomputed on every pass, so it survives a restart.
func labelsNote(reg *fleet.ClusterRegistration, cluster *fleet.Cluster, cfg *config.Config) string {
	if len(reg.Spec.ClusterLabels) == 0 {
		return ""
	}
	madeForIt := cluster.Name == names.AutoClusterName(reg.Spec.ClientID) && !cluster.CreationTimestamp.Before(&reg.CreationTimestamp)
	if !madeForIt {
		return fmt.Sprintf("the agent's %d labels were not applied: Cluster %s existed already, and the labels of an existing Cluster are never changed by registration", len(reg.Spec.ClusterLabels), cluster.Name)
	}
	_, refused := registration.ClusterLabels(reg.Spec.ClusterLabels, cfg.AgentLabelKeyAllowed, cfg.IgnoreClusterRegistrationLabels)
	if len(refused) == 0 {
		return ""
	}
	return "agent labels left out of the Cluster: " + registration.DescribeRefusedLabels(refused)
}

// olderThan orders registrations of one clientID: by creation time, and,
// within the same second (the precision of creationTimestamp), a granted
// one before one that is not, then by name. Only registrations that are not
// granted yet supersede, so a tie between a granted registration and a new
// one always removes the granted one.
func olderThan(a, b *fleet.ClusterRegistration) bool {
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	// Within one second, the agent's own request time orders its requests.
	ra, errA := time.Parse(time.RFC3339Nano, a.Annotations[registration.RequestedAtAnnotation])
	rb, errB := time.Parse(time.RFC3339Nano, b.Annotations[registration.RequestedAtAnnotation])
	if errA == nil && errB == nil && !ra.Equal(rb) {
		return ra.Before(rb)
	}
	if a.Status.Granted != b.Status.Granted {
		return a.Status.Granted
	}
	return a.Name < b.Name
}

// statusRules are the registration's kstatus rules: its Granted condition
// is its Ready.
var statusRules = reconciler.Conditions{Ready: fleet.GrantedCondition, Failing: "granting failed"}

// setStatus computes the registration's status from what the grant pass
// found and how it ended (err nil: granted), and returns the outcome.
func setStatus(reg *fleet.ClusterRegistration, g *grant, err error, now time.Time) reconciler.Outcome {
	if g.clusterName != "" {
		reg.Status.ClusterName = g.clusterName
	}
	out := reconciler.Failure(err)
	if err == nil {
		reg.Status.Granted = true
		where := fmt.Sprintf("waits in Secret %s/%s until the agent picks it up", config.DefaultSystemRegistrationNS, g.secretName)
		if sealed(reg) {
			reg.Status.Credential = g.sealedCredential
			where = "is in status.credential, sealed to the agent's key"
		}
		out = reconciler.Success(fleet.GrantedReason,
			"granted as Cluster %s/%s: request ServiceAccount %s/%s; the credential %s",
			reg.Namespace, g.clusterName, g.deploymentNamespace, registration.RequestServiceAccountName(reg.Name), where)
		if g.labelsNote != "" {
			out.Message += "; " + g.labelsNote
		}
	}
	statusRules.Set(reg, out, now)
	return out
}

// label marks obj as made for reg.
func label(reg *fleet.ClusterRegistration, obj client.Object) {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[fleet.ManagedLabel] = "true"
	labels[registration.RegistrationLabel] = reg.Name
	labels[registration.RegistrationNamespaceLabel] = reg.Namespace
	obj.SetLabels(labels)
}

// ownedBy reports whether obj was made for reg.
func ownedBy(obj client.Object, reg *fleet.ClusterRegistration) bool {
	l := obj.GetLabels()
	return l[registration.RegistrationLabel] == reg.Name && l[registration.RegistrationNamespaceLabel] == reg.Namespace
}

func credentialSecretName(reg *fleet.ClusterRegistration) string {
	return registration.CredentialSecretName(reg.Spec.ClientID, reg.Spec.ClientRandom)
}

// credentialRoleName names the Role and RoleBinding in the system
// registration namespace that give the import identity its credential
// Secret. The namespace is shared by all workspaces, so the name carries a
// hash of the workspace and the registration's name.
func credentialRoleName(reg *fleet.ClusterRegistration) string {
	return names.CredentialAccess(reg.Namespace, reg.Name)
}
