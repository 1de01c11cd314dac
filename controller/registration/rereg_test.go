package registration_test

// No takeover of an existing Cluster (shared/SPEC.md §6, a token holder): a
// token not bound to a Cluster's clientID registers it again only with a
// registration signed by the identity key recorded on the Cluster, or with
// an approval; once for a Cluster registered before agents had keys. A
// cluster's recovery identity registers only that cluster, signed with its
// key. Every request here is the real one, made as that identity (the
// import identity through its token, the recovery identity through a token
// minted by the agent's request identity) against the real API server and
// controller.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
)

func getCluster(t *testing.T, ws, name string) *fleet.Cluster {
	t.Helper()
	c := &fleet.Cluster{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: name}, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// recordedKey is the identity key the Cluster records.
func recordedKey(t *testing.T, ws, name string) string {
	t.Helper()
	return getCluster(t, ws, name).Annotations[fleet.AgentIdentityKeyAnnotation]
}

// waitRecordedKey waits for the Cluster to record key.
func waitRecordedKey(t *testing.T, ws, name, key string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "Cluster "+ws+"/"+name+" to record identity key "+registration.IdentityFingerprint(key), func() error {
		if got := recordedKey(t, ws, name); got != key {
			return fmt.Errorf("records %q", got)
		}
		return nil
	})
}

// offline makes the Cluster's agent look offline: its last heartbeat long
// past the default window (3 × 1m).
func offline(t *testing.T, ws, cluster string) {
	t.Helper()
	heartbeat(t, up, ws, cluster, time.Now().Add(-time.Hour))
}

// refusedFor waits for reg's refusal with reason, checks its message, the
// Warning events on the registration and (when cluster is set) on the
// Cluster, and that nothing was made for it.
func refusedFor(t *testing.T, a *agent, reg *fleet.ClusterRegistration, reason, cluster string, msgHas ...string) string {
	t.Helper()
	got := waitCondition(t, reg.Namespace, reg.Name, metav1.ConditionFalse, reason)
	msg := meta.FindStatusCondition(got.Status.Conditions, fleet.GrantedCondition).Message
	for _, want := range msgHas {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal message %q lacks %q", msg, want)
		}
	}
	if st := meta.FindStatusCondition(got.Status.Conditions, fleet.StalledCondition); st == nil || st.Status != metav1.ConditionTrue {
		t.Errorf("a refusal is Stalled: %+v", got.Status.Conditions)
	}
	waitEvent(t, reg.Namespace, reg.Name, reason, "")
	if cluster != "" {
		waitObjectEvent(t, reg.Namespace, "Cluster", cluster, reason, reg.Name)
	}
	nothingMadeFor(t, a, reg)
	return msg
}

// stillWorks checks that the credential still reads its BundleDeployments.
func stillWorks(t *testing.T, secret *corev1.Secret) {
	t.Helper()
	c := as(t, string(secret.Data[registration.KeyToken]))
	if err := c.List(t.Context(), &fleet.BundleDeploymentList{}, client.InNamespace(string(secret.Data[registration.KeyDeploymentNamespace]))); err != nil {
		t.Errorf("the owner's credential stopped working: %v", err)
	}
}

// TestReregistration_OfflineClusterIsNotTakenOverByAGenericToken is the
// finding: agent A registered a cluster and went offline; another token of
// the workspace, not bound to the clientID, registers that clientID with
// another key (or none). Refused, for good, and A keeps its cluster.
func TestReregistration_OfflineClusterIsNotTakenOverByAGenericToken(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	clientID := randomID("victim-")
	owner := newAgent(t, ws, "open", tokenWith(t, ws, "open", fleet.ClusterRegistrationTokenSpec{}))
	_, secret := owner.register(t, clientID, map[string]string{"env": "admin-chose"})
	clusterName := string(secret.Data[registration.KeyClusterName])
	if got := recordedKey(t, ws, clusterName); got != owner.identity.PublicKey() {
		t.Fatalf("the new Cluster records key %q, want the owner's", got)
	}
	checkIn(t, secret)
	offline(t, ws, clusterName)

	attacker := newAgent(t, ws, "other", tokenWith(t, ws, "other", fleet.ClusterRegistrationTokenSpec{}))
	reg := attacker.create(t, clientID, map[string]string{"env": "mine-now"})
	refusedFor(t, attacker, reg, fleet.ReregistrationRefusedReason, clusterName,
		clusterName, "holding identity key "+registration.IdentityFingerprint(owner.identity.PublicKey()),
		"signed by another key", "spec.clientID: "+fmt.Sprintf("%q", clientID)+" in "+ws, "spec.approval: Manual", "Recovering a cluster")

	// Unsigned, as an agent of an earlier release registers: refused too.
	older := newAgent(t, ws, "older", tokenWith(t, ws, "older", fleet.ClusterRegistrationTokenSpec{}))
	older.identity = nil
	unsigned := older.create(t, clientID, nil)
	refusedFor(t, older, unsigned, fleet.ReregistrationRefusedReason, clusterName, "this registration is not signed")

	// The owner keeps its cluster, its credential, its labels and its key.
	stillWorks(t, secret)
	c := getCluster(t, ws, clusterName)
	if c.Labels["env"] != "admin-chose" || c.Annotations[fleet.AgentIdentityKeyAnnotation] != owner.identity.PublicKey() {
		t.Errorf("the Cluster changed: labels %v, key %q", c.Labels, c.Annotations[fleet.AgentIdentityKeyAnnotation])
	}

	// A refusal is final: a pass after a change of the Cluster (its agent
	// looks online, then offline again) grants nothing.
	if err := up.Patch(t.Context(), reg, annotate(reg, "test/poke", "1")); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, up, ws, clusterName, time.Now())
	offline(t, ws, clusterName)
	time.Sleep(2 * time.Second)
	waitCondition(t, ws, reg.Name, metav1.ConditionFalse, fleet.ReregistrationRefusedReason)
	nothingMadeFor(t, attacker, reg)
}

// TestReregistration_SignatureCopiedFromTheOwnersRegistrationIsRefused: a
// token holder who read the owner's registration (its identity key and
// signature are not secret) puts them on a registration of its own, with
// its own credential key so that it could open the answer. The signature
// covers the credential key: refused before anything else.
func TestReregistration_SignatureCopiedFromTheOwnersRegistrationIsRefused(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	clientID := randomID("victim-")
	owner := newAgent(t, ws, "open", tokenWith(t, ws, "open", fleet.ClusterRegistrationTokenSpec{}))
	ownerReg, secret := owner.register(t, clientID, nil)
	clusterName := string(secret.Data[registration.KeyClusterName])
	offline(t, ws, clusterName)
	seen := getReg(t, ws, ownerReg.Name)

	attacker := newAgent(t, ws, "other", tokenWith(t, ws, "other", fleet.ClusterRegistrationTokenSpec{}))
	attacker.identity = nil
	key, err := registration.NewCredentialKey()
	if err != nil {
		t.Fatal(err)
	}
	forged := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: randomName(),
			Labels:      map[string]string{fleet.RegistrationTokenLabel: "other"},
			Annotations: map[string]string{registration.RequestedAtAnnotation: time.Now().UTC().Format(time.RFC3339Nano)}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: randomID("random-"), CredentialPublicKey: key.PublicKey(),
			IdentityPublicKey: seen.Spec.IdentityPublicKey, IdentitySignature: seen.Spec.IdentitySignature},
	}
	if err := attacker.importer.Create(t.Context(), forged); err != nil {
		t.Fatalf("creating the forged registration as the import identity: %v", err)
	}
	refusedFor(t, attacker, forged, "InvalidIdentitySignature", "", "does not verify")
	stillWorks(t, secret)
}

// TestReregistration_ReplayedSignatureIsRefused: a registration signed long
// before it is created (an old signature used again) is refused, even with
// the owner's key.
func TestReregistration_ReplayedSignatureIsRefused(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	clientID := randomID("cid-")
	a := newAgent(t, ws, "open", tokenWith(t, ws, "open", fleet.ClusterRegistrationTokenSpec{}))
	_, secret := a.register(t, clientID, nil)
	clusterName := string(secret.Data[registration.KeyClusterName])
	offline(t, ws, clusterName)

	key, err := registration.NewCredentialKey()
	if err != nil {
		t.Fatal(err)
	}
	old := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: randomName(),
			Labels:      map[string]string{fleet.RegistrationTokenLabel: "open"},
			Annotations: map[string]string{registration.RequestedAtAnnotation: time.Now().Add(-11 * time.Minute).UTC().Format(time.RFC3339Nano)}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: randomID("random-"), CredentialPublicKey: key.PublicKey()},
	}
	if err := a.identity.Sign(old); err != nil {
		t.Fatal(err)
	}
	if err := a.importer.Create(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	refusedFor(t, a, old, "InvalidIdentitySignature", "", "at most 10m0s", "old signature")
	stillWorks(t, secret)
}

// TestReregistration_PreCreatedClusterNeedsATokenBoundToIt: an admin made
// Cluster prod-eu for a cluster to come; a generic token registering its
// clientID first does not get it, the token bound to it does.
func TestReregistration_PreCreatedClusterNeedsATokenBoundToIt(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	const clientID = "prod-eu"
	pre := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "prod-eu", Labels: map[string]string{"tier": "prod"}}, Spec: fleet.ClusterSpec{ClientID: clientID}}
	if err := up.Create(t.Context(), pre); err != nil {
		t.Fatal(err)
	}
	attacker := newAgent(t, ws, "generic", tokenWith(t, ws, "generic", fleet.ClusterRegistrationTokenSpec{}))
	reg := attacker.create(t, clientID, nil)
	refusedFor(t, attacker, reg, fleet.ReregistrationRefusedReason, "prod-eu", "no agent ever registered it", `spec.clientID: "prod-eu" in `+ws)
	if got := recordedKey(t, ws, "prod-eu"); got != "" {
		t.Errorf("the refused registration recorded key %q", got)
	}

	legit := newAgent(t, ws, "prod-eu", importToken(t, ws, "prod-eu", clientID))
	good, secret := legit.register(t, clientID, nil)
	waitCondition(t, ws, good.Name, metav1.ConditionTrue, fleet.GrantedReason)
	if got := string(secret.Data[registration.KeyClusterName]); got != "prod-eu" {
		t.Fatalf("granted as %q, want prod-eu", got)
	}
	waitRecordedKey(t, ws, "prod-eu", legit.identity.PublicKey())
}

// TestReregistration_SameKeyThroughAGenericTokenWhileOnline: the agent
// reinstalled with its token's values (its identity Secret survives helm
// uninstall) registers its cluster again, while its last heartbeat is
// recent, which earlier releases refused.
func TestReregistration_SameKeyThroughAGenericTokenWhileOnline(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	clientID := randomID("cid-")
	a := newAgent(t, ws, "open", tokenWith(t, ws, "open", fleet.ClusterRegistrationTokenSpec{}))
	first, secret := a.register(t, clientID, nil)
	clusterName := string(secret.Data[registration.KeyClusterName])
	checkIn(t, secret)
	heartbeat(t, up, ws, clusterName, time.Now())

	again, secret2 := a.register(t, clientID, nil)
	waitCondition(t, ws, again.Name, metav1.ConditionTrue, fleet.GrantedReason)
	if got := string(secret2.Data[registration.KeyClusterName]); got != clusterName {
		t.Errorf("registered again as %q, want %s", got, clusterName)
	}
	stillWorks(t, secret2)
	testenv.Eventually(t, 30*time.Second, "the first registration superseded", func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(first), &fleet.ClusterRegistration{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

// TestReregistration_ManualApprovalHandsAnExistingClusterToANewKey: an
// admin's approval is the way back for an agent that lost its key: the
// registration waits (never granted before), is granted once approved, and
// the Cluster records the new key, so the old key no longer registers it.
func TestReregistration_ManualApprovalHandsAnExistingClusterToANewKey(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	ctx := t.Context()
	clientID := randomID("cid-")
	old := newAgent(t, ws, "open", tokenWith(t, ws, "open", fleet.ClusterRegistrationTokenSpec{}))
	_, secret := old.register(t, clientID, nil)
	clusterName := string(secret.Data[registration.KeyClusterName])
	offline(t, ws, clusterName)

	renewed := newAgent(t, ws, "manual", tokenWith(t, ws, "manual", fleet.ClusterRegistrationTokenSpec{Approval: fleet.ApprovalManual}))
	reg := renewed.create(t, clientID, nil)
	waitCondition(t, ws, reg.Name, metav1.ConditionFalse, fleet.PendingApprovalReason)
	time.Sleep(time.Second)
	nothingMadeFor(t, renewed, reg)
	if got := recordedKey(t, ws, clusterName); got != old.identity.PublicKey() {
		t.Fatalf("a pending registration changed the recorded key to %q", got)
	}

	chartClusterRole(t, "fleet-registration-approver")
	approver := user(t, ws, "approver", "fleet-registration-approver")
	testenv.Eventually(t, 15*time.Second, "approving as fleet-registration-approver", func() error {
		return approver.Patch(ctx, reg, annotate(reg, fleet.ApprovedAnnotation, "true"))
	})
	granted := renewed.waitCredential(t, reg, 30*time.Second)
	if got := string(granted.Data[registration.KeyClusterName]); got != clusterName {
		t.Fatalf("granted as %q, want %s", got, clusterName)
	}
	waitRecordedKey(t, ws, clusterName, renewed.identity.PublicKey())

	// The old key no longer registers the cluster through a generic token.
	stale := old.create(t, clientID, nil)
	refusedFor(t, old, stale, fleet.ReregistrationRefusedReason, clusterName, "holding identity key "+registration.IdentityFingerprint(renewed.identity.PublicKey()))
}

// TestReregistration_ClusterRegisteredBeforeKeysComesBackOnce: a Cluster
// registered by an agent of an earlier release records no key. While that
// agent is online nothing takes it over; once offline, one registration is
// granted under the old rule and records its key, and from then on the key
// holds.
func TestReregistration_ClusterRegisteredBeforeKeysComesBackOnce(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	clientID := randomID("legacy-")
	legacy := newAgent(t, ws, "open", tokenWith(t, ws, "open", fleet.ClusterRegistrationTokenSpec{}))
	legacy.unsealed = true
	_, secret := legacy.register(t, clientID, nil)
	legacy.pickedUp(t, secret)
	clusterName := string(secret.Data[registration.KeyClusterName])
	checkIn(t, secret)
	if got := recordedKey(t, ws, clusterName); got != "" {
		t.Fatalf("an unsigned registration recorded key %q", got)
	}

	upgraded := newAgent(t, ws, "open", "")
	upgraded.importer = legacy.importer
	online := upgraded.create(t, clientID, nil)
	refusedFor(t, upgraded, online, fleet.ReregistrationRefusedReason, clusterName, "earlier release", "checked in")

	offline(t, ws, clusterName)
	back, _ := upgraded.register(t, clientID, nil)
	waitCondition(t, ws, back.Name, metav1.ConditionTrue, fleet.GrantedReason)
	waitRecordedKey(t, ws, clusterName, upgraded.identity.PublicKey())

	other := newAgent(t, ws, "open", "")
	other.importer = legacy.importer
	second := other.create(t, clientID, nil)
	refusedFor(t, other, second, fleet.ReregistrationRefusedReason, clusterName, "holding identity key "+registration.IdentityFingerprint(upgraded.identity.PublicKey()))
}

// TestIdentityKey_RecordedFromTheHeartbeatOfAnUpgradedAgent: for a Cluster
// registered before agents had keys, the controller records the key its
// agent reports in its heartbeat (only its live request identity may write
// status.agent), and then makes its recovery identity.
func TestIdentityKey_RecordedFromTheHeartbeatOfAnUpgradedAgent(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	legacy := newAgent(t, ws, "open", tokenWith(t, ws, "open", fleet.ClusterRegistrationTokenSpec{}))
	legacy.unsealed = true
	_, secret := legacy.register(t, randomID("legacy-"), nil)
	legacy.pickedUp(t, secret)
	clusterName := string(secret.Data[registration.KeyClusterName])
	checkIn(t, secret)
	clusterNS := names.ClusterNamespace(ws, clusterName)
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: clusterNS, Name: registration.RecoveryServiceAccountName}, &corev1.ServiceAccount{}); !apierrors.IsNotFound(err) {
		t.Errorf("a recovery identity for a Cluster without a key: %v", err)
	}

	k, err := registration.NewIdentityKey()
	if err != nil {
		t.Fatal(err)
	}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"agent":{"lastSeen":%q,"identityPublicKey":%q}}}`, time.Now().UTC().Format(time.RFC3339), k.PublicKey()))
	agentClient := as(t, string(secret.Data[registration.KeyToken]))
	if err := agentClient.Status().Patch(t.Context(), &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: clusterName}}, patch); err != nil {
		t.Fatalf("the upgraded agent's heartbeat: %v", err)
	}
	waitRecordedKey(t, ws, clusterName, k.PublicKey())
	waitRecoveryIdentity(t, ws, clusterName)
}

// waitRecoveryIdentity waits for the Cluster's recovery ServiceAccount and
// its RoleBinding.
func waitRecoveryIdentity(t *testing.T, ws, cluster string) {
	t.Helper()
	clusterNS := names.ClusterNamespace(ws, cluster)
	testenv.Eventually(t, 30*time.Second, "the recovery identity of "+ws+"/"+cluster, func() error {
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: clusterNS, Name: registration.RecoveryServiceAccountName}, &corev1.ServiceAccount{}); err != nil {
			return err
		}
		rb := &rbacv1.RoleBinding{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: registration.RecoveryBindingName(cluster)}, rb); err != nil {
			return err
		}
		if rb.RoleRef.Name != registration.RecoveryIdentityClusterRole || len(rb.Subjects) != 1 || rb.Subjects[0].Namespace != clusterNS {
			return fmt.Errorf("RoleBinding %+v", rb)
		}
		return nil
	})
}

// recoveryToken mints a token of the cluster's recovery identity as its
// agent does: with the request identity of its credential.
func recoveryToken(t *testing.T, secret *corev1.Secret) string {
	t.Helper()
	req := as(t, string(secret.Data[registration.KeyToken]))
	ns := string(secret.Data[registration.KeyDeploymentNamespace])
	var bearer string
	testenv.Eventually(t, 15*time.Second, "a token of the recovery identity, minted by the request identity", func() error {
		tr, err := req.cs.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), registration.RecoveryServiceAccountName,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(registration.RecoveryTokenTTL / time.Second))}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		bearer = tr.Status.Token
		return nil
	})
	remember(bearer)
	return bearer
}

// TestRecoveryIdentity_RegistersOnlyItsClusterWithItsKey: a registered
// cluster's recovery identity (its agent holds a long-lived token of it)
// registers that cluster again, signed with the recorded key: that is how
// an agent whose request credential expired comes back by itself. Anything
// else is refused: another key, another cluster, a bad signature, by the
// controller; no label or another namespace's, by the API server. It reads
// nothing.
func TestRecoveryIdentity_RegistersOnlyItsClusterWithItsKey(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	ctx := t.Context()
	owner := newAgent(t, ws, "open", tokenWith(t, ws, "open", fleet.ClusterRegistrationTokenSpec{}))
	clientID := randomID("cid-")
	first, secret := owner.register(t, clientID, nil)
	clusterName := string(secret.Data[registration.KeyClusterName])
	clusterNS := string(secret.Data[registration.KeyDeploymentNamespace])
	checkIn(t, secret)
	waitRecoveryIdentity(t, ws, clusterName)
	bearer := recoveryToken(t, secret)
	// A second cluster of the workspace, and its agent's key.
	neighbour := newAgent(t, ws, "open", "")
	neighbour.importer = owner.importer
	neighbourID := randomID("cid-")
	_, neighbourSecret := neighbour.register(t, neighbourID, nil)
	offline(t, ws, clusterName)

	recovering := newAgent(t, ws, "", bearer)
	recovering.recoveryNS = clusterNS
	recovering.identity = owner.identity

	// The API server refuses what the recovery identity may not create (once
	// its RoleBinding reached the authorizer, RBAC lets it try).
	for what, labels := range map[string]map[string]string{
		"without the recovery label":         nil,
		"with another namespace's label":     {fleet.RecoveryNamespaceLabel: names.ClusterNamespace(ws, "other")},
		"with a token label besides its own": {fleet.RecoveryNamespaceLabel: clusterNS, fleet.RegistrationTokenLabel: "open"},
		"with a token label only":            {fleet.RegistrationTokenLabel: "open"},
	} {
		reg := newRegistration(ws, "", clientID)
		reg.Labels = labels
		err := refusedBy(t, "the recovery identity creating a registration "+what,
			"must carry label fleet.cattle.io/recovery-namespace naming that identity namespace ("+clusterNS+")", func() error {
				return recovering.importer.Create(ctx, reg.DeepCopy())
			})
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v", what, err)
		}
	}
	if n := countGenerated(t, ws).registrations; n != 2 {
		t.Errorf("%d registrations in the workspace after the refused requests, want the two granted ones", n)
	}
	// It reads no Secret and no Cluster, and lists no registration.
	for what, err := range map[string]error{
		"a Secret of its cluster namespace": recovering.importer.List(ctx, &corev1.SecretList{}, client.InNamespace(clusterNS)),
		"a Secret of the workspace":         recovering.importer.List(ctx, &corev1.SecretList{}, client.InNamespace(ws)),
		"its Cluster":                       recovering.importer.Get(ctx, client.ObjectKey{Namespace: ws, Name: clusterName}, &fleet.Cluster{}),
		"the Clusters":                      recovering.importer.List(ctx, &fleet.ClusterList{}, client.InNamespace(ws)),
		"the registrations":                 recovering.importer.List(ctx, &fleet.ClusterRegistrationList{}, client.InNamespace(ws)),
		"its BundleDeployments":             recovering.importer.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(clusterNS)),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the recovery identity reading %s: want Forbidden, got %v", what, err)
		}
	}
	// Nobody else may set the recovery label: not an import identity, not
	// an admin with the register verb.
	chartClusterRole(t, "fleet-registration-admin")
	registrar := user(t, ws, "registrar", "fleet-registration-admin")
	for who, c := range map[string]identity{"the import identity": owner.importer, "a registration admin": registrar} {
		reg := newRegistration(ws, "", clientID)
		if who == "the import identity" {
			reg.Labels = map[string]string{fleet.RegistrationTokenLabel: "open"}
		} else {
			reg.Labels = map[string]string{}
		}
		reg.Labels[fleet.RecoveryNamespaceLabel] = clusterNS
		refusedBy(t, who+" setting the recovery label", "may be set only by the recovery identity of that cluster namespace", func() error {
			return c.Create(ctx, reg.DeepCopy())
		})
	}

	// Signed by another key (a stolen recovery token alone): refused.
	thief := newAgent(t, ws, "", bearer)
	thief.recoveryNS = clusterNS
	stolen := thief.create(t, clientID, nil)
	refusedFor(t, thief, stolen, fleet.RecoveryRefusedReason, clusterName, "holding identity key "+registration.IdentityFingerprint(owner.identity.PublicKey()))
	// Another cluster's clientID, signed with that cluster's own key: this
	// recovery identity registers only its own cluster.
	sideways := newAgent(t, ws, "", bearer)
	sideways.recoveryNS = clusterNS
	sideways.identity = neighbour.identity
	other := sideways.create(t, neighbourID, nil)
	refusedFor(t, sideways, other, fleet.RecoveryRefusedReason, string(neighbourSecret.Data[registration.KeyClusterName]), "registers only the Cluster of its own namespace")
	// A clientID no Cluster has: it never creates one.
	nowhere := recovering.create(t, randomID("new-"), nil)
	refusedFor(t, recovering, nowhere, fleet.RecoveryRefusedReason, "", "never creates one")
	// A signature that does not verify.
	bad := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: randomName(), Labels: map[string]string{fleet.RecoveryNamespaceLabel: clusterNS},
			Annotations: map[string]string{registration.RequestedAtAnnotation: time.Now().UTC().Format(time.RFC3339Nano)}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: randomID("random-"), CredentialPublicKey: first.Spec.CredentialPublicKey},
	}
	if err := owner.identity.Sign(bad); err != nil {
		t.Fatal(err)
	}
	bad.Spec.ClientRandom = randomID("random-")
	if err := recovering.importer.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	refusedFor(t, recovering, bad, "InvalidIdentitySignature", "", "does not verify")
	stillWorks(t, neighbourSecret)

	// The legitimate path: signed with the recorded key, granted as the same
	// Cluster; the earlier credential is superseded.
	reg, cred := recovering.registerSealed(t, clientID)
	waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
	if cred.ClusterName != clusterName || cred.DeploymentNamespace != clusterNS {
		t.Errorf("recovered as %s in %s, want %s in %s", cred.ClusterName, cred.DeploymentNamespace, clusterName, clusterNS)
	}
	if err := as(t, cred.Token).List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(clusterNS)); err != nil {
		t.Errorf("the recovered credential: %v", err)
	}
	// Its label never changes, not even by an admin.
	relabel := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{%q:"cluster-elsewhere"}}}`, fleet.RecoveryNamespaceLabel))
	if err := up.Patch(ctx, getReg(t, ws, reg.Name), relabel); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot be added, changed or removed") {
		t.Errorf("changing the recovery label: want Forbidden, got %v", err)
	}
	tok := &fleet.ClusterRegistrationToken{}
	if err := up.Get(ctx, client.ObjectKey{Namespace: ws, Name: "open"}, tok); err != nil || len(tok.Status.RegisteredClusters) != 0 {
		t.Errorf("the token counts clusters: %v %v", tok.Status.RegisteredClusters, err)
	}
}
