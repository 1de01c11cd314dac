package registration_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
)

func countRBAC(t *testing.T, sel client.MatchingLabels) (roles, bindings int) {
	t.Helper()
	rl, bl := &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}
	if err := up.List(t.Context(), rl, sel); err != nil {
		t.Fatal(err)
	}
	if err := up.List(t.Context(), bl, sel); err != nil {
		t.Fatal(err)
	}
	return len(rl.Items), len(bl.Items)
}

func TestGrant_NewClusterRegistersWithAgentLabelsMinusReservedOnes(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
	clientID := randomID("kube-system-uid-")
	start := time.Now()
	reg, secret := a.register(t, clientID, map[string]string{
		"env":                           "prod",
		fleet.CreatedByAgentPodLabel:    "fleet-agent-7d9",
		"fleet.cattle.io/cluster":       "someone-else",
		"management.cattle.io/cluster":  "c-m-123",
		"fleet.cattle.io/shard-id":      "shard-9",
		"example.com/region":            "eu-west",
		"fleet.cattle.io.example.com/x": "y",
	})
	t.Logf("credential Secret seen by the agent %s after creating the registration", time.Since(start).Round(time.Millisecond))

	clusterName := names.AutoClusterName(clientID)
	cluster := &fleet.Cluster{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: clusterName}, cluster); err != nil {
		t.Fatalf("Cluster %s: %v", clusterName, err)
	}
	wantLabels := map[string]string{
		"env":                           "prod",
		fleet.CreatedByAgentPodLabel:    "fleet-agent-7d9",
		"example.com/region":            "eu-west",
		"fleet.cattle.io.example.com/x": "y",
		fleet.ClusterLabel:              clusterName,
	}
	if cluster.Spec.ClientID != clientID || !maps.Equal(cluster.Labels, wantLabels) {
		t.Errorf("Cluster clientID %q labels %v\nwant labels %v", cluster.Spec.ClientID, cluster.Labels, wantLabels)
	}

	clusterNS := names.ClusterNamespace(ws, clusterName)
	sa := registration.RequestServiceAccountName(reg.Name)
	want := map[string]string{
		registration.KeyClusterNamespace:    ws,
		registration.KeyClusterName:         clusterName,
		registration.KeyDeploymentNamespace: clusterNS,
		registration.KeyServiceAccount:      sa,
	}
	for k, v := range want {
		if got := string(secret.Data[k]); got != v {
			t.Errorf("credential Secret key %s = %q, want %q", k, got, v)
		}
	}
	if len(secret.Data[registration.KeyToken]) == 0 {
		t.Error("credential Secret has no token")
	}
	exp, err := time.Parse(time.RFC3339, string(secret.Data[registration.KeyExpires]))
	if err != nil || exp.Sub(time.Now()) < 23*time.Hour || exp.Sub(time.Now()) > 25*time.Hour {
		t.Errorf("credential Secret expires %q (%v), want about 24h (the default request credential TTL)", secret.Data[registration.KeyExpires], err)
	}
	// The credential went into the registration's status: no Secret was
	// made for it.
	secrets := &corev1.SecretList{}
	if err := up.List(t.Context(), secrets, client.MatchingLabels{registration.RegistrationLabel: reg.Name}); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("%d Secrets made for a registration with a key, want none (the credential is in its status)", len(secrets.Items))
	}

	got := waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
	if !got.Status.Granted || got.Status.ClusterName != clusterName {
		t.Errorf("status %+v", got.Status)
	}
	if len(got.OwnerReferences) != 0 || !slices.Contains(got.Finalizers, registration.RegistrationFinalizer) {
		t.Errorf("owner references %+v finalizers %v, want no owner (deleting the Cluster deletes it) and the finalizer", got.OwnerReferences, got.Finalizers)
	}
	ns := &corev1.Namespace{}
	if err := up.Get(t.Context(), client.ObjectKey{Name: clusterNS}, ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels[fleet.ClusterLabel] != clusterName || ns.Annotations[fleet.ClusterNamespaceAnnotation] != ws {
		t.Errorf("cluster namespace labels %v annotations %v", ns.Labels, ns.Annotations)
	}
}

func TestGrant_MatchesPredefinedClusterByClientID(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	clientID := randomID("predefined-")
	pre := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "edge-1", Labels: map[string]string{"owner": "admin"}}, Spec: fleet.ClusterSpec{ClientID: clientID}}
	if err := up.Create(t.Context(), pre); err != nil {
		t.Fatal(err)
	}
	// A Cluster no agent registered yet is registered through a token bound
	// to its clientID (a generic one only creates new Clusters).
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", clientID))
	reg, secret := a.register(t, clientID, map[string]string{"env": "agent-says"})
	if got := string(secret.Data[registration.KeyClusterName]); got != "edge-1" {
		t.Fatalf("clusterName %q, want the predefined edge-1", got)
	}
	if got := string(secret.Data[registration.KeyDeploymentNamespace]); got != names.ClusterNamespace(ws, "edge-1") {
		t.Fatalf("deploymentNamespace %q", got)
	}
	list := &fleet.ClusterList{}
	if err := up.List(t.Context(), list, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d Clusters in the workspace, want only the predefined one", len(list.Items))
	}
	if l := list.Items[0].Labels; l["env"] != "" || l["owner"] != "admin" {
		t.Errorf("the predefined Cluster's labels were changed: %v", l)
	}
	if got := waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason); got.Status.ClusterName != "edge-1" {
		t.Fatalf("status.clusterName %q", got.Status.ClusterName)
	}
}

// refusedLeavesNothing checks that a refused registration got no
// credential, no identity and no Cluster.
func refusedLeavesNothing(t *testing.T, reg *fleet.ClusterRegistration) {
	t.Helper()
	// Give the controller time to do what it should not.
	time.Sleep(time.Second)
	secret := &corev1.Secret{}
	err := up.Get(t.Context(), client.ObjectKey{Namespace: config.DefaultSystemRegistrationNS, Name: registration.CredentialSecretName(reg.Spec.ClientID, reg.Spec.ClientRandom)}, secret)
	if !apierrors.IsNotFound(err) {
		t.Errorf("credential Secret of a refused registration: %v", err)
	}
	sel := client.MatchingLabels{registration.RegistrationLabel: reg.Name, registration.RegistrationNamespaceLabel: reg.Namespace}
	sas := &corev1.ServiceAccountList{}
	if err := up.List(t.Context(), sas, sel); err != nil {
		t.Fatal(err)
	}
	roles, bindings := countRBAC(t, sel)
	if len(sas.Items) != 0 || roles != 0 || bindings != 0 {
		t.Errorf("a refused registration has %d ServiceAccounts, %d Roles, %d RoleBindings", len(sas.Items), roles, bindings)
	}
	c := &fleet.Cluster{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: reg.Namespace, Name: names.AutoClusterName(reg.Spec.ClientID)}, c); !apierrors.IsNotFound(err) {
		t.Errorf("a Cluster was made for a refused registration: %v", err)
	}
	got := getReg(t, reg.Namespace, reg.Name)
	if got.Status.Granted {
		t.Error("refused registration is granted")
	}
}

func TestGrant_TokenBoundToClientIDRefusesOtherClientIDs(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	bound := randomID("bound-")
	a := newAgent(t, ws, "import-token-edge", importToken(t, ws, "import-token-edge", bound))

	other := a.create(t, randomID("other-"), nil)
	got := waitCondition(t, ws, other.Name, metav1.ConditionFalse, fleet.ClientIDNotAllowedReason)
	if msg := got.Status.Conditions[0].Message; !strings.Contains(msg, bound) || !strings.Contains(msg, other.Spec.ClientID) {
		t.Errorf("message does not name both clientIDs: %s", msg)
	}
	waitEvent(t, ws, other.Name, fleet.ClientIDNotAllowedReason, bound)
	refusedLeavesNothing(t, other)

	// The clientID the token is bound to registers.
	reg, _ := a.register(t, bound, nil)
	waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
	// The refused registration has another clientID, so that grant does
	// not supersede it: it stays, with its reason.
	waitCondition(t, ws, other.Name, metav1.ConditionFalse, fleet.ClientIDNotAllowedReason)
}

func TestGrant_MissingTokenRefusesWithTokenNotFound(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	// The import identity of a deleted token is gone with it (its
	// ServiceAccount is owned by the token), so a registration that names a
	// missing token is one made before the token went, or by hand.
	reg := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, GenerateName: "request-", Labels: map[string]string{fleet.RegistrationTokenLabel: "gone"}},
		Spec:       fleet.ClusterRegistrationSpec{ClientID: randomID("cid-"), ClientRandom: randomID("random-")},
	}
	if err := up.Create(t.Context(), reg); err != nil {
		t.Fatal(err)
	}
	got := waitCondition(t, ws, reg.Name, metav1.ConditionFalse, fleet.TokenNotFoundReason)
	msg := got.Status.Conditions[0].Message
	if !strings.Contains(msg, ws+"/gone") || !strings.Contains(msg, "create a new ClusterRegistrationToken and reinstall the agent with its values") {
		t.Errorf("message: %s", msg)
	}
	waitEvent(t, ws, reg.Name, fleet.TokenNotFoundReason, "gone")
	refusedLeavesNothing(t, reg)
}

func TestGrant_RequestIdentityReachesOnlyItsOwnCluster(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
	regA, secretA := a.register(t, randomID("a-"), nil)
	_, secretB := a.register(t, randomID("b-"), nil)
	clusterA, nsA := string(secretA.Data[registration.KeyClusterName]), string(secretA.Data[registration.KeyDeploymentNamespace])
	clusterB, nsB := string(secretB.Data[registration.KeyClusterName]), string(secretB.Data[registration.KeyDeploymentNamespace])
	saA := string(secretA.Data[registration.KeyServiceAccount])
	saB := string(secretB.Data[registration.KeyServiceAccount])
	req := as(t, string(secretA.Data[registration.KeyToken]))
	ctx := t.Context()

	allowed := map[string]func() error{
		"list BundleDeployments in its cluster namespace": func() error {
			return req.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(nsA))
		},
		"watch BundleDeployments in its cluster namespace": func() error {
			w, err := req.Watch(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(nsA))
			if err == nil {
				w.Stop()
			}
			return err
		},
		"list Secrets (BundleDeployment contents) in its cluster namespace": func() error {
			return req.List(ctx, &corev1.SecretList{}, client.InNamespace(nsA))
		},
		"get its Cluster": func() error {
			return req.Get(ctx, client.ObjectKey{Namespace: ws, Name: clusterA}, &fleet.Cluster{})
		},
		"patch its Cluster's status": func() error {
			c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: clusterA}}
			return req.Status().Patch(ctx, c, client.RawPatch(types.MergePatchType, []byte(`{"status":{"agent":{"lastSeen":"`+time.Now().UTC().Format(time.RFC3339)+`"}}}`)))
		},
		"create a token for its own ServiceAccount": func() error {
			tr, err := req.cs.CoreV1().ServiceAccounts(nsA).CreateToken(ctx, saA, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
			if err == nil {
				remember(tr.Status.Token)
			}
			return err
		},
	}
	for what, do := range allowed {
		if err := do(); err != nil {
			t.Errorf("request identity cannot %s: %v", what, err)
		}
	}

	forbidden := map[string]func() error{
		"read Secrets in the workspace": func() error {
			return req.List(ctx, &corev1.SecretList{}, client.InNamespace(ws))
		},
		"read Secrets in another cluster's namespace": func() error {
			return req.List(ctx, &corev1.SecretList{}, client.InNamespace(nsB))
		},
		"read credential Secrets": func() error {
			return req.Get(ctx, client.ObjectKeyFromObject(secretB), &corev1.Secret{})
		},
		"list BundleDeployments of another cluster": func() error {
			return req.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(nsB))
		},
		"create BundleDeployments": func() error {
			return req.Create(ctx, &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "x"}})
		},
		"patch its Cluster's spec": func() error {
			c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: clusterA}}
			return req.Patch(ctx, c, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":true}}`)))
		},
		"update its Cluster": func() error {
			c := &fleet.Cluster{}
			if err := req.Get(ctx, client.ObjectKey{Namespace: ws, Name: clusterA}, c); err != nil {
				return fmt.Errorf("get before update: %w", err)
			}
			c.Spec.Paused = true
			return req.Update(ctx, c)
		},
		"patch another Cluster's status": func() error {
			c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: clusterB}}
			return req.Status().Patch(ctx, c, client.RawPatch(types.MergePatchType, []byte(`{"status":{"agent":{"lastSeen":"2020-01-01T00:00:00Z"}}}`)))
		},
		"list Clusters": func() error {
			return req.List(ctx, &fleet.ClusterList{}, client.InNamespace(ws))
		},
		"create ClusterRegistrations": func() error {
			return req.Create(ctx, &fleet.ClusterRegistration{
				ObjectMeta: metav1.ObjectMeta{Namespace: ws, GenerateName: "request-"},
				Spec:       fleet.ClusterRegistrationSpec{ClientID: "x", ClientRandom: randomID("random-")},
			})
		},
		"create a token for another ServiceAccount": func() error {
			_, err := req.cs.CoreV1().ServiceAccounts(nsB).CreateToken(ctx, saB, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		},
		"delete its own registration": func() error {
			return req.Delete(ctx, regA)
		},
	}
	for what, do := range forbidden {
		if err := do(); !apierrors.IsForbidden(err) {
			t.Errorf("request identity can %s (want Forbidden, got %v)", what, err)
		}
	}
}

// An agent of an earlier version (no key) gets its credential in the
// clear: its import identity may read and delete it, no identity may list
// or watch credential Secrets, and one it deleted is not written again.
// (Any token's import identity may get a Secret there by name, as for a
// sealed one: the 244-bit name, over a random value only the agent and
// the controller know, is what keeps others from it; see
// TestGrant_SealedCredentialOpensOnlyForTheAgentThatAsked.)
func TestGrant_UnsealedCredentialOfAnOlderAgent(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok-a", importToken(t, ws, "tok-a", ""))
	a.unsealed = true
	b := newAgent(t, ws, "tok-b", importToken(t, ws, "tok-b", ""))
	reg, secret := a.register(t, randomID("cid-"), nil)
	ctx := t.Context()
	key := client.ObjectKeyFromObject(secret)

	if _, err := b.importer.cs.CoreV1().Secrets(key.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + key.Name}); !apierrors.IsForbidden(err) {
		t.Errorf("import identity B watches A's credential Secret: want Forbidden, got %v", err)
	}
	for name, imp := range map[string]*agent{"A": a, "B": b} {
		if err := imp.importer.List(ctx, &corev1.SecretList{}, client.InNamespace(key.Namespace)); !apierrors.IsForbidden(err) {
			t.Errorf("import identity %s lists every credential Secret: want Forbidden, got %v", name, err)
		}
	}
	if err := b.importer.Delete(ctx, secret.DeepCopy()); !apierrors.IsForbidden(err) {
		t.Errorf("import identity B deletes A's credential Secret: want Forbidden, got %v", err)
	}
	// A may read and delete its own (the agent deletes it once copied).
	if err := a.importer.Get(ctx, key, &corev1.Secret{}); err != nil {
		t.Errorf("import identity A cannot read its credential Secret: %v", err)
	}
	if err := a.importer.Delete(ctx, secret); err != nil {
		t.Errorf("import identity A cannot delete its credential Secret: %v", err)
	}
	// Picked up and deleted: it is not written again.
	waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
	time.Sleep(2 * time.Second)
	if err := up.Get(ctx, key, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("credential Secret written again after the agent deleted it: %v", err)
	}
}

func TestGrant_DeletingTheClusterRevokesTheRequestTokenAndRemovesRegistrations(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
	clientID := randomID("cid-")
	reg, secret := a.register(t, clientID, nil)
	req := as(t, string(secret.Data[registration.KeyToken]))
	nsC := string(secret.Data[registration.KeyDeploymentNamespace])
	if err := req.List(t.Context(), &fleet.BundleDeploymentList{}, client.InNamespace(nsC)); err != nil {
		t.Fatalf("request token does not work before the deletion: %v", err)
	}

	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: string(secret.Data[registration.KeyClusterName])}}
	start := time.Now()
	if err := up.Delete(t.Context(), cluster); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: nsC, Name: string(secret.Data[registration.KeyServiceAccount])}}
	testenv.Eventually(t, 10*time.Second, "the request ServiceAccount to be deleted", func() error {
		err := up.Get(t.Context(), client.ObjectKeyFromObject(sa), &corev1.ServiceAccount{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("ServiceAccount: %v", err)
	})
	t.Logf("request ServiceAccount deleted %s after deleting the Cluster", time.Since(start).Round(time.Millisecond))
	// The kube-apiserver caches successful token authentications for 10s
	// (its TokenSuccessCacheTTL), so a token of a deleted
	// ServiceAccount may work up to 10s longer.
	testenv.Eventually(t, 20*time.Second, "the request token to stop authenticating", func() error {
		err := req.List(t.Context(), &fleet.BundleDeploymentList{}, client.InNamespace(nsC))
		if apierrors.IsUnauthorized(err) {
			return nil
		}
		return fmt.Errorf("got %v, want Unauthorized", err)
	})
	t.Logf("request token rejected (401) %s after deleting the Cluster", time.Since(start).Round(time.Millisecond))
	testenv.Eventually(t, 30*time.Second, "the registration to be removed", func() error {
		err := up.Get(t.Context(), client.ObjectKeyFromObject(reg), &fleet.ClusterRegistration{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("registration: %v", err)
	})
	testenv.Eventually(t, 30*time.Second, "everything made for the registration to be removed", func() error {
		if c := countGenerated(t, ws); c != (counts{}) {
			return fmt.Errorf("left: %+v", c)
		}
		return nil
	})
	t.Logf("registration and its objects removed %s after deleting the Cluster", time.Since(start).Round(time.Millisecond))
}

func TestGrant_FiftyReRegistrationsLeaveOneOfEach(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
	clientID := randomID("cid-")

	// A refused registration of the same clientID (named a missing token)
	// goes too.
	refused := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, GenerateName: "request-", Labels: map[string]string{fleet.RegistrationTokenLabel: "gone"}},
		Spec:       fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: randomID("random-")},
	}
	if err := up.Create(t.Context(), refused); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ws, refused.Name, metav1.ConditionFalse, fleet.TokenNotFoundReason)

	const n = 50
	var first, last *corev1.Secret
	var lastReg *fleet.ClusterRegistration
	start := time.Now()
	for i := range n {
		reg, secret := a.register(t, clientID, nil)
		waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
		if i == 0 {
			first = secret
		}
		last, lastReg = secret, reg
	}
	elapsed := time.Since(start)
	var c counts
	testenv.Eventually(t, 30*time.Second, "one registration and one set of objects", func() error {
		c = countGenerated(t, ws)
		// The workspace Role and its binding, the cluster namespace's
		// binding to the shared role; no Secret (the sealed credential is
		// in the registration's status).
		if c.registrations != 1 || c.serviceAccounts != 1 || c.roles != 1 || c.roleBindings != 2 || c.secrets != 0 {
			return fmt.Errorf("%+v", c)
		}
		return nil
	})
	t.Logf("%d sequential re-registrations of one clientID took %s (%s each, grant seen by the agent and status granted); left: %+v",
		n, elapsed.Round(time.Millisecond), (elapsed / n).Round(time.Millisecond), c)

	regs := &fleet.ClusterRegistrationList{}
	if err := up.List(t.Context(), regs, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	if regs.Items[0].Name != lastReg.Name {
		t.Errorf("kept %s, want the newest %s", regs.Items[0].Name, lastReg.Name)
	}
	clusters := &fleet.ClusterList{}
	if err := up.List(t.Context(), clusters, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	if len(clusters.Items) != 1 {
		t.Errorf("%d Clusters, want 1", len(clusters.Items))
	}
	// The first request token was revoked with its ServiceAccount; the
	// last one works.
	nsC := string(last.Data[registration.KeyDeploymentNamespace])
	if err := as(t, string(first.Data[registration.KeyToken])).List(t.Context(), &fleet.BundleDeploymentList{}, client.InNamespace(nsC)); !apierrors.IsUnauthorized(err) {
		t.Errorf("superseded request token: want Unauthorized, got %v", err)
	}
	if err := as(t, string(last.Data[registration.KeyToken])).List(t.Context(), &fleet.BundleDeploymentList{}, client.InNamespace(nsC)); err != nil {
		t.Errorf("newest request token: %v", err)
	}
}

// An agent of an earlier version (no key) gets its credential in the
// clear, which is removed after the pickup timeout.
func TestGrant_CredentialRemovedAfterPickupTimeout(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
	a.unsealed = true
	reg, secret := a.register(t, randomID("cid-"), nil)
	got := waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
	grantedAt := got.Status.Conditions[0].LastTransitionTime.Time
	key := client.ObjectKeyFromObject(secret)

	testenv.Eventually(t, pickupTimeout+10*time.Second, "the credential Secret to be removed", func() error {
		err := up.Get(t.Context(), key, &corev1.Secret{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("secret: %v", err)
	})
	after := time.Since(grantedAt)
	t.Logf("credential Secret removed %s after the grant (pickup timeout %s)", after.Round(100*time.Millisecond), pickupTimeout)
	if after < pickupTimeout-time.Second {
		t.Errorf("removed after %s, before the pickup timeout %s", after, pickupTimeout)
	}
	testenv.Eventually(t, 10*time.Second, "the credential Role and RoleBinding to be removed", func() error {
		sel := client.MatchingLabels{registration.RegistrationLabel: reg.Name, registration.RegistrationNamespaceLabel: ws}
		rl := &rbacv1.RoleList{}
		if err := up.List(t.Context(), rl, sel, client.InNamespace(config.DefaultSystemRegistrationNS)); err != nil {
			return err
		}
		bl := &rbacv1.RoleBindingList{}
		if err := up.List(t.Context(), bl, sel, client.InNamespace(config.DefaultSystemRegistrationNS)); err != nil {
			return err
		}
		if len(rl.Items)+len(bl.Items) > 0 {
			return fmt.Errorf("%d Roles, %d RoleBindings left", len(rl.Items), len(bl.Items))
		}
		return nil
	})
	if err := a.importer.Get(t.Context(), key, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("import identity after the pickup timeout: want Forbidden (its Role went with the Secret), got %v", err)
	}
	// The request identity stays.
	nsC := string(secret.Data[registration.KeyDeploymentNamespace])
	if err := as(t, string(secret.Data[registration.KeyToken])).List(t.Context(), &fleet.BundleDeploymentList{}, client.InNamespace(nsC)); err != nil {
		t.Errorf("request token after the pickup timeout: %v", err)
	}
	if c := countGenerated(t, ws); c != (counts{registrations: 1, serviceAccounts: 1, roles: 1, roleBindings: 2}) {
		t.Errorf("left after the pickup timeout: %+v", c)
	}
}

func TestGrant_ResumesAfterInterruptedPass(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	name := randomID("admin-")[:20]
	// Something in the way of the last RBAC step stops every pass there,
	// with the Cluster, namespace, ServiceAccount and cluster-namespace
	// Role already made: the state a crash at that point leaves.
	blocker := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: registration.RequestServiceAccountName(name)}}
	if err := up.Create(t.Context(), blocker); err != nil {
		t.Fatal(err)
	}
	// An admin registers directly: no token label, no token check, no
	// credential Role (the admin reads the Secret).
	reg := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
		Spec:       fleet.ClusterRegistrationSpec{ClientID: randomID("cid-"), ClientRandom: randomID("random-")},
	}
	if err := up.Create(t.Context(), reg); err != nil {
		t.Fatal(err)
	}
	got := waitCondition(t, ws, name, metav1.ConditionFalse, "ObjectConflict")
	if !strings.Contains(got.Status.Conditions[0].Message, "Role "+ws+"/"+blocker.Name) {
		t.Errorf("message does not name the object in the way: %s", got.Status.Conditions[0].Message)
	}
	nsC := names.ClusterNamespace(ws, names.AutoClusterName(reg.Spec.ClientID))
	sa := &corev1.ServiceAccount{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: nsC, Name: registration.RequestServiceAccountName(name)}, sa); err != nil {
		t.Fatalf("request ServiceAccount before the interruption ended: %v", err)
	}
	secretKey := client.ObjectKey{Namespace: config.DefaultSystemRegistrationNS, Name: registration.CredentialSecretName(reg.Spec.ClientID, reg.Spec.ClientRandom)}
	if err := up.Get(t.Context(), secretKey, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("credential Secret written before the grant could finish: %v", err)
	}

	// Lose part of the earlier work: the next pass makes it again (and
	// stops at the same place).
	if err := up.Delete(t.Context(), sa); err != nil {
		t.Fatal(err)
	}
	newSA := &corev1.ServiceAccount{}
	testenv.Eventually(t, 20*time.Second, "the request ServiceAccount to be made again", func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(sa), newSA); err != nil {
			return err
		}
		if newSA.UID == sa.UID {
			return errors.New("still the old one")
		}
		return nil
	})
	if getReg(t, ws, name).Status.Granted {
		t.Fatal("granted while the Role was in the way")
	}

	// Clear the way; any event on the registration brings it back.
	if err := up.Delete(t.Context(), blocker); err != nil {
		t.Fatal(err)
	}
	poke := 0
	testenv.Eventually(t, 30*time.Second, "the grant", func() error {
		r := getReg(t, ws, name)
		if r.Status.Granted {
			return nil
		}
		poke++
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{"test/poke":"%d"}}}`, poke)))
		if err := up.Patch(t.Context(), r, patch); err != nil {
			return err
		}
		return errors.New("not granted yet")
	})
	secret := &corev1.Secret{}
	if err := up.Get(t.Context(), secretKey, secret); err != nil {
		t.Fatalf("credential Secret: %v", err)
	}
	remember(string(secret.Data[registration.KeyToken]))
	if err := as(t, string(secret.Data[registration.KeyToken])).List(t.Context(), &fleet.BundleDeploymentList{}, client.InNamespace(nsC)); err != nil {
		t.Errorf("the token handed out belongs to the new ServiceAccount: %v", err)
	}
	// No credential Role for an admin-made registration.
	if c := countGenerated(t, ws); c != (counts{registrations: 1, serviceAccounts: 1, roles: 1, roleBindings: 2, secrets: 1}) {
		t.Errorf("objects: %+v", c)
	}

	// Deleting the registration removes everything made for it.
	if err := up.Delete(t.Context(), reg); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the registration and its objects to be removed", func() error {
		if c := countGenerated(t, ws); c != (counts{}) {
			return fmt.Errorf("left: %+v", c)
		}
		return nil
	})
}

// The credential is lost before the agent read it (a sealed one: the agent
// restarted and lost its key; an older agent's Secret: deleted), and the
// request ServiceAccount with it. By design the controller does not make
// them again: a granted registration is done, and an agent that got
// nothing registers again (new key, new registration), which supersedes
// this one.
func TestGrant_GrantedRegistrationIsNeverGrantedAgain(t *testing.T) {
	for name, unsealed := range map[string]bool{"sealed": false, "older agent": true} {
		t.Run(name, func(t *testing.T) {
			ws := testenv.Namespace(t, up, "fleet-ws-")
			a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
			a.unsealed = unsealed
			reg, secret := a.register(t, randomID("cid-"), nil)
			granted := waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)

			if unsealed {
				if err := up.Delete(t.Context(), secret); err != nil {
					t.Fatal(err)
				}
			}
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: string(secret.Data[registration.KeyDeploymentNamespace]), Name: string(secret.Data[registration.KeyServiceAccount])}}
			if err := up.Delete(t.Context(), sa); err != nil {
				t.Fatal(err)
			}
			patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"test/poke":"1"}}}`))
			if err := up.Patch(t.Context(), getReg(t, ws, reg.Name), patch); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second)
			if unsealed {
				if err := up.Get(t.Context(), client.ObjectKeyFromObject(secret), &corev1.Secret{}); !apierrors.IsNotFound(err) {
					t.Errorf("credential Secret of a granted registration was made again: %v", err)
				}
			}
			if err := up.Get(t.Context(), client.ObjectKeyFromObject(sa), &corev1.ServiceAccount{}); !apierrors.IsNotFound(err) {
				t.Errorf("request ServiceAccount of a granted registration was made again: %v", err)
			}
			now := getReg(t, ws, reg.Name)
			if !now.Status.Granted {
				t.Error("registration no longer granted")
			}
			if !bytes.Equal(now.Status.Credential, granted.Status.Credential) {
				t.Error("the sealed credential of a granted registration was written again")
			}

			// The agent registers again and gets a working credential. An
			// older agent signs nothing, so only once its Cluster is
			// offline (rereg_test.go).
			if unsealed {
				heartbeat(t, up, ws, string(secret.Data[registration.KeyClusterName]), time.Now().Add(-time.Hour))
			}
			again, secret2 := a.register(t, reg.Spec.ClientID, nil)
			waitCondition(t, ws, again.Name, metav1.ConditionTrue, fleet.GrantedReason)
			if err := as(t, string(secret2.Data[registration.KeyToken])).List(t.Context(), &fleet.BundleDeploymentList{}, client.InNamespace(sa.Namespace)); err != nil {
				t.Errorf("credential of the new registration: %v", err)
			}
			testenv.Eventually(t, 20*time.Second, "the old registration to be superseded", func() error {
				err := up.Get(t.Context(), client.ObjectKeyFromObject(reg), &fleet.ClusterRegistration{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return errors.New("still there")
			})
		})
	}
}

func TestGrant_HashCollisionRefusedWithClearCondition(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	clientID := randomID("cid-")
	squatter := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: names.AutoClusterName(clientID)}, Spec: fleet.ClusterSpec{ClientID: "someone-else"}}
	if err := up.Create(t.Context(), squatter); err != nil {
		t.Fatal(err)
	}
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
	reg := a.create(t, clientID, nil)
	got := waitCondition(t, ws, reg.Name, metav1.ConditionFalse, "ClusterNameTaken")
	if !strings.Contains(got.Status.Conditions[0].Message, "someone-else") {
		t.Errorf("message: %s", got.Status.Conditions[0].Message)
	}
	// Fixing the Cluster (the Cluster watch brings the registration back)
	// lets it through.
	if err := up.Delete(t.Context(), squatter); err != nil {
		t.Fatal(err)
	}
	a.waitCredential(t, reg, 60*time.Second)
	waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
}

// Runs last in this file's order; the name keeps it apart.
func TestGrant_ZZNeverLogsOrRecordsABearerToken(t *testing.T) {
	bearers.Lock()
	tokens := append([]string(nil), bearers.tokens...)
	bearers.Unlock()
	if len(tokens) < 10 {
		t.Skipf("only %d bearer tokens seen; run with the other tests", len(tokens))
	}
	text := logs.String()
	regs := &fleet.ClusterRegistrationList{}
	if err := up.List(t.Context(), regs); err != nil {
		t.Fatal(err)
	}
	for _, r := range regs.Items {
		for _, c := range r.Status.Conditions {
			text += c.Message
		}
	}
	evs := &corev1.EventList{}
	if err := up.List(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		text += e.Message
	}
	for _, tok := range tokens {
		if tok != "" && strings.Contains(text, tok) {
			t.Fatal("a bearer token reached a log line, a status or an event")
		}
	}
	t.Logf("checked %d bearer tokens against %d bytes of logs, statuses and events", len(tokens), len(text))
}

// A credential sealed to the agent's key, in the registration's status:
// the import identity reads its registration by name and nothing else (no
// list, no watch, no status write, no Secret); another token's identity
// that learned the name reads a box it cannot open; the token inside is
// the request identity's and works; no Secret holds it, and nothing is
// made for the pickup.
func TestGrant_SealedCredentialOpensOnlyForTheAgentThatAsked(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok-a", importToken(t, ws, "tok-a", ""))
	b := newAgent(t, ws, "tok-b", importToken(t, ws, "tok-b", ""))
	reg, cred := a.registerSealed(t, randomID("cid-"))
	ctx := t.Context()
	key := client.ObjectKeyFromObject(reg)

	if strings.Contains(string(reg.Status.Credential), cred.Token) {
		t.Error("the status carries the bearer token in the clear")
	}
	// The token is the request identity's: it reads its own Cluster.
	requester := as(t, cred.Token)
	if err := requester.Get(ctx, client.ObjectKey{Namespace: ws, Name: cred.ClusterName}, &fleet.Cluster{}); err != nil {
		t.Errorf("the opened token cannot read its own Cluster: %v", err)
	}

	for name, imp := range map[string]*agent{"A": a, "B": b} {
		if err := imp.importer.List(ctx, &fleet.ClusterRegistrationList{}, client.InNamespace(ws)); !apierrors.IsForbidden(err) {
			t.Errorf("import identity %s lists the registrations: want Forbidden, got %v", name, err)
		}
		if _, err := imp.importer.cs.CoreV1().RESTClient().Get().AbsPath("/apis/fleet.cattle.io/v1alpha1/namespaces", ws, "clusterregistrations").
			Param("watch", "true").Param("fieldSelector", "metadata.name="+key.Name).Stream(ctx); !apierrors.IsForbidden(err) {
			t.Errorf("import identity %s watches a registration: want Forbidden, got %v", name, err)
		}
		forged := reg.DeepCopy()
		forged.Status.Credential = []byte("forged")
		if err := imp.importer.Status().Update(ctx, forged); !apierrors.IsForbidden(err) {
			t.Errorf("import identity %s writes a registration's status: want Forbidden, got %v", name, err)
		}
		if err := imp.importer.Delete(ctx, reg.DeepCopy()); !apierrors.IsForbidden(err) {
			t.Errorf("import identity %s deletes a registration: want Forbidden, got %v", name, err)
		}
		if err := imp.importer.List(ctx, &corev1.SecretList{}, client.InNamespace(config.DefaultSystemRegistrationNS)); !apierrors.IsForbidden(err) {
			t.Errorf("import identity %s lists Secrets: want Forbidden, got %v", name, err)
		}
		// No Secret by name either: its own token's values Secret.
		if err := imp.importer.Get(ctx, client.ObjectKey{Namespace: ws, Name: imp.tokenName}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
			t.Errorf("import identity %s reads a Secret: want Forbidden, got %v", name, err)
		}
	}
	// B learned the name: it reads the box and cannot open it.
	stolen := &fleet.ClusterRegistration{}
	if err := b.importer.Get(ctx, key, stolen); err != nil {
		t.Fatalf("import identity B reading a registration by its name: %v", err)
	}
	other, _ := registration.NewCredentialKey()
	if _, err := other.Open(stolen.Status.Credential, reg.Namespace, reg.Name, string(reg.UID)); err == nil {
		t.Error("another key opened A's credential")
	}

	got := waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
	if c := apimeta.FindStatusCondition(got.Status.Conditions, fleet.GrantedCondition); c == nil || !strings.Contains(c.Message, "sealed") {
		t.Errorf("Granted message does not say the credential is sealed: %+v", got.Status.Conditions)
	}
	if roles, bindings := countRBAC(t, client.MatchingLabels{registration.RegistrationLabel: reg.Name}); roles != 1 || bindings != 2 {
		t.Errorf("RBAC made for the registration: %d Roles, %d RoleBindings; want 1 Role (its Cluster, in the workspace) and 2 bindings (it, and the cluster namespace's shared role)", roles, bindings)
	}
	if c := countGenerated(t, ws); c.secrets != 0 {
		t.Errorf("%d Secrets made for the registrations of %s, want none", c.secrets, ws)
	}

	// Deleting the token removes its import identity: A's token no longer
	// reads anything.
	if err := up.Delete(ctx, &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "tok-a"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the deleted token's import identity to stop working", func() error {
		err := a.importer.Get(ctx, key, &fleet.ClusterRegistration{})
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("still reads: %v", err)
	})
}
