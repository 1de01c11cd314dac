package proxy_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	authuser "k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/assertion"
	fleetnames "github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/proxy"
)

// chartNamespace is where the chart's identities (the controller's and
// fleet-proxy's ServiceAccounts and RBAC, exactly as charts/fleet renders
// them) are installed for the tests that act as them.
const chartNamespace = "cattle-fleet-system"

// chartIdentities installs the chart's identities once and returns
// clientsets acting as the controller and as fleet-proxy.
func chartIdentities(t *testing.T) (controller *rest.Config, fleetProxy kubernetes.Interface) {
	t.Helper()
	up := env.Upstream
	cfg, err := up.FleetControllerIdentity(t.Context(), chartNamespace)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := up.ServiceAccountToken(t.Context(), chartNamespace, "fleet-proxy", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	remember(tok)
	cs, err := kubernetes.NewForConfig(up.ConfigForToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	return cfg, cs
}

func remember(tok string) {
	tokensMu.Lock()
	tokens = append(tokens, tok)
	tokensMu.Unlock()
}

func clientset(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// legacySigningSecret is the Secret an earlier release kept its private
// key in.
func legacySigningSecret(t *testing.T, ns string) *corev1.Secret {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: proxy.LegacySigningSecret},
		Data: map[string][]byte{"current.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})}}
}

// holdsSigningKey reports whether b is, or holds, an Ed25519 private key
// (the kind that signs assertions and direct tokens): PEM PKCS#8, or the
// raw 64 bytes of one.
func holdsSigningKey(b []byte) bool {
	if len(b) == ed25519.PrivateKeySize && ed25519.NewKeyFromSeed(b[:ed25519.SeedSize]).Equal(ed25519.PrivateKey(b)) {
		return true
	}
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return false
		}
		if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
			if _, ok := k.(ed25519.PrivateKey); ok {
				return true
			}
		}
	}
}

func forbidden(t *testing.T, what string, err error, says string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: %v; want 403", what, err)
		return
	}
	if says != "" && !strings.Contains(err.Error(), says) {
		t.Errorf("%s: the refusal does not say %q: %v", what, says, err)
	}
}

// TestSigningKeys_TheControllerCannotObtainASigningKey (issue 27, finding
// 8): fleet-proxy runs as its own ServiceAccount with the chart's rights,
// the controller as its own with the chart's rights and the shipped
// admission policies. No request the controller makes yields a key that
// agents would trust: no Secret holds a private key (the Secret of earlier
// releases is gone), it may not mint fleet-proxy's token nor make a Secret
// the token controller would fill with it, not impersonate fleet-proxy, not
// bind itself fleet-proxy's Role, not write the published keys. It still
// mints the tokens of the identities it makes, and fleet-proxy still signs
// what the published keys verify.
func TestSigningKeys_TheControllerCannotObtainASigningKey(t *testing.T) {
	ctx := t.Context()
	up := env.Upstream
	controllerCfg, proxyCS := chartIdentities(t)
	controller := clientset(t, controllerCfg)

	// An earlier release's Secret, then fleet-proxy as `fleet proxy`
	// starts (its chart identity): serving certificate, peer token, keys.
	if err := up.Client.Create(ctx, legacySigningSecret(t, chartNamespace)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := proxy.EnsureServingCertificate(ctx, proxyCS, chartNamespace, "fleet-proxy"); err != nil {
		t.Fatalf("fleet-proxy with the chart's rights: %v", err)
	}
	if _, err := proxy.EnsurePeerToken(ctx, proxyCS, chartNamespace); err != nil {
		t.Fatalf("fleet-proxy with the chart's rights: %v", err)
	}
	keys, err := proxy.StartSigningKeys(ctx, proxy.SigningOptions{Client: proxyCS, Namespace: chartNamespace, Replica: "chart-identity"})
	if err != nil {
		t.Fatalf("fleet-proxy with the chart's rights: %v", err)
	}
	tok, err := keys.Assert(&authuser.DefaultInfo{Name: "alice"}, "fleet-default/c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := assertion.NewVerifier(keys.KeySet()).Verify(tok, "fleet-default/c1", time.Now()); err != nil {
		t.Fatalf("fleet-proxy's assertion does not verify with the published keys: %v", err)
	}

	// Reading: every Secret of the namespace, and the published keys.
	secrets, err := controller.CoreV1().Secrets(chartNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("the controller reads Secrets (its ClusterRole): %v", err)
	}
	for _, s := range secrets.Items {
		if s.Name == proxy.LegacySigningSecret {
			t.Errorf("Secret %s is still there", s.Name)
		}
		for k, v := range s.Data {
			if holdsSigningKey(v) {
				t.Errorf("Secret %s key %s holds a signing key the controller can read", s.Name, k)
			}
		}
	}
	cm, err := controller.CoreV1().ConfigMaps(chartNamespace).Get(ctx, proxy.SigningKeysConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the controller reads ConfigMaps of its namespace (its Role): %v", err)
	}
	if _, ok := cm.Data[keys.KeyID()]; !ok {
		t.Errorf("ConfigMap %s lacks fleet-proxy's key %s: %v", cm.Name, keys.KeyID(), cm.Data)
	}
	for kid, v := range cm.Data {
		var entry map[string]any
		if err := json.Unmarshal([]byte(v), &entry); err != nil || holdsSigningKey([]byte(v)) || strings.Contains(v, `"d"`) {
			t.Errorf("entry %s is not a public key only: %s", kid, v)
		}
		if pub, _ := entry["publicKey"].(string); len(pub) > 48 {
			t.Errorf("entry %s carries %d bytes of key (an Ed25519 public key is 32)", kid, len(pub)*3/4)
		}
	}

	// Becoming fleet-proxy.
	_, err = controller.CoreV1().ServiceAccounts(chartNamespace).CreateToken(ctx, "fleet-proxy",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	forbidden(t, "a TokenRequest for fleet-proxy's ServiceAccount", err, "may request tokens only for the ServiceAccounts it makes")
	_, err = controller.CoreV1().Secrets(chartNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "proxy-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "fleet-proxy"}},
		Type:       corev1.SecretTypeServiceAccountToken,
	}, metav1.CreateOptions{})
	forbidden(t, "a service-account-token Secret for fleet-proxy", err, "kubernetes.io/service-account-token")
	as := rest.CopyConfig(controllerCfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + chartNamespace + ":fleet-proxy"}
	_, err = clientset(t, as).CoreV1().ConfigMaps(chartNamespace).Get(ctx, proxy.SigningKeysConfigMap, metav1.GetOptions{})
	forbidden(t, "impersonating fleet-proxy", err, "impersonate")
	_, err = controller.RbacV1().RoleBindings(chartNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "controller-as-proxy"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "fleet-proxy"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: chartNamespace, Name: "fleet-controller"}},
	}, metav1.CreateOptions{})
	forbidden(t, "binding fleet-proxy's Role to the controller", err, "")

	// Publishing a key of its own.
	_, forged, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := forged.Public().(ed25519.PublicKey)
	entry, err := json.Marshal(map[string]any{"publicKey": []byte(pub), "replica": "controller", "refreshed": time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	mine := cm.DeepCopy()
	mine.Data[assertion.KeyID(pub)] = string(entry)
	_, err = controller.CoreV1().ConfigMaps(chartNamespace).Update(ctx, mine, metav1.UpdateOptions{})
	forbidden(t, "updating the published keys", err, "")
	patch := fmt.Sprintf(`{"data":{%q:%q}}`, assertion.KeyID(pub), entry)
	_, err = controller.CoreV1().ConfigMaps(chartNamespace).Patch(ctx, proxy.SigningKeysConfigMap, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	forbidden(t, "patching the published keys", err, "")
	err = controller.CoreV1().ConfigMaps(chartNamespace).Delete(ctx, proxy.SigningKeysConfigMap, metav1.DeleteOptions{})
	forbidden(t, "deleting the published keys", err, "")
	_, err = controller.CoreV1().ConfigMaps(chartNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other-keys"}}, metav1.CreateOptions{})
	forbidden(t, "creating a ConfigMap in fleet-proxy's namespace", err, "")
	if _, ok := keys.KeySet().Key(assertion.KeyID(pub)); ok {
		t.Error("fleet-proxy publishes the controller's key")
	}

	// Still allowed: the tokens of the identities the controller makes.
	workspace := testenv.Namespace(t, up.Client, "fleet-ws-")
	clusterNS := fleetnames.ClusterNamespace(workspace, "c1")
	if _, err := controller.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = up.Clientset.CoreV1().Namespaces().Delete(context.Background(), clusterNS, metav1.DeleteOptions{})
	})
	mint := func(ns, name string) error {
		_, err := controller.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		tr, err := controller.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err == nil {
			remember(tr.Status.Token)
		}
		return err
	}
	for _, ok := range []struct{ ns, name string }{
		{clusterNS, "request-reg-1"},                   // an agent's request identity
		{workspace, "import-token-1"},                  // a token's import identity
		{chartNamespace, "fleet-controller-bootstrap"}, // the local cluster's
	} {
		if err := mint(ok.ns, ok.name); err != nil {
			t.Errorf("the controller's TokenRequest for %s/%s: %v", ok.ns, ok.name, err)
		}
	}
	for _, refused := range []struct{ ns, name string }{
		{workspace, "request-reg-1"},       // a request identity outside a cluster namespace
		{chartNamespace, "import-token-1"}, // an import identity beside fleet-proxy
		{clusterNS, "fleet-controller-bootstrap"},
	} {
		forbidden(t, fmt.Sprintf("a TokenRequest for %s/%s", refused.ns, refused.name), mint(refused.ns, refused.name), "may request tokens only")
	}
}

// TestSigningKeys_EveryReplicaServesEveryKey: two replicas, each with its
// own key; each serves both (an agent reading the keys through either
// verifies what either signs), and no private part.
func TestSigningKeys_EveryReplicaServesEveryKey(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "keys-replicas-")
	a := startKeys(t, t.Context(), ns, "a", nil)
	b := startKeys(t, t.Context(), ns, "b", nil)
	if a.KeyID() == b.KeyID() {
		t.Fatal("two replicas share a key")
	}
	testenv.Eventually(t, 30*time.Second, "each replica to serve both keys", func() error {
		for _, r := range []*proxy.SigningKeys{a, b} {
			ks := r.KeySet()
			if _, ok := ks.Key(a.KeyID()); !ok {
				return fmt.Errorf("%v lacks a's key", ks.KeyIDs())
			}
			if _, ok := ks.Key(b.KeyID()); !ok {
				return fmt.Errorf("%v lacks b's key", ks.KeyIDs())
			}
		}
		return nil
	})
	alice := &authuser.DefaultInfo{Name: "alice", Groups: []string{"team"}}
	byA, _, err := a.IssueDirect(alice, "fleet-default/c1", assertion.DirectVerbs, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	assertB, err := b.Assert(alice, "fleet-default/c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := assertion.NewVerifier(b.KeySet()).VerifyDirect(byA, "fleet-default/c1", time.Now()); err != nil {
		t.Errorf("a's direct token with the keys b serves: %v", err)
	}
	if _, err := assertion.NewVerifier(a.KeySet()).Verify(assertB, "fleet-default/c1", time.Now()); err != nil {
		t.Errorf("b's assertion with the keys a serves: %v", err)
	}
	jwks, err := a.JWKS()
	if err != nil || strings.Contains(string(jwks), `"d"`) {
		t.Errorf("the JWK Set holds a private key (or fails: %v): %s", err, jwks)
	}
}

// TestSigningKeys_RestartKeepsTheOldKeyUntilItsTokensExpire: a replica that
// stops (or restarts with a new key) leaves its key published, so what it
// signed keeps verifying; a key not refreshed for longer than the longest
// token lives is dropped; an entry deleted by hand is written again; a
// replica signs nothing that would outlive its key's publication.
func TestSigningKeys_RestartKeepsTheOldKeyUntilItsTokensExpire(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "keys-restart-")
	alice := &authuser.DefaultInfo{Name: "alice"}

	// Replica "a" signs a 24 h direct token, then restarts: its new
	// process has a new key; the old one stays.
	first, stop := context.WithCancel(t.Context())
	old := startKeys(t, first, ns, "a", nil)
	tok, _, err := old.IssueDirect(alice, "fleet-default/c1", assertion.DirectVerbs, assertion.MaxDirectLifetime)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	restarted := startKeys(t, t.Context(), ns, "a", nil)
	if _, err := assertion.NewVerifier(restarted.KeySet()).VerifyDirect(tok, "fleet-default/c1", time.Now()); err != nil {
		t.Fatalf("a token of the replica's previous key, after the restart: %v", err)
	}
	// Until just before the retention ends, still; after, dropped from
	// what is served and from the ConfigMap.
	// (Replicas whose clocks are that far ahead, stopped right after.)
	skewed, stopSkewed := context.WithCancel(t.Context())
	late := startKeys(t, skewed, ns, "late", func() time.Time { return time.Now().Add(proxy.KeyRetention - time.Minute) })
	if _, ok := late.KeySet().Key(old.KeyID()); !ok {
		t.Error("the stopped replica's key was dropped before its tokens expired")
	}
	later := startKeys(t, skewed, ns, "later", func() time.Time { return time.Now().Add(proxy.KeyRetention + time.Minute) })
	if _, ok := later.KeySet().Key(old.KeyID()); ok {
		t.Error("a key not refreshed for longer than the longest token lives is still served")
	}
	stopSkewed()
	cm, err := env.Upstream.Clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), proxy.SigningKeysConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cm.Data[old.KeyID()]; ok {
		t.Error("the stale key is still in the ConfigMap")
	}
	if !strings.Contains(logs.String(), "dropping a signing key not refreshed") {
		t.Error("dropping the stale key was not logged")
	}

	// The ConfigMap deleted: every running replica publishes again.
	if err := env.Upstream.Clientset.CoreV1().ConfigMaps(ns).Delete(t.Context(), proxy.SigningKeysConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the restarted replica's key published again", func() error {
		cm, err := env.Upstream.Clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), proxy.SigningKeysConfigMap, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, ok := cm.Data[restarted.KeyID()]; !ok {
			return fmt.Errorf("keys %v", cm.Data)
		}
		return nil
	})

	// A replica whose entry would be dropped before a token expires
	// refuses to sign it (here: kept 30 s, a token of 60 s).
	short, err := proxy.StartSigningKeys(t.Context(), proxy.SigningOptions{Client: env.Upstream.Clientset, Namespace: ns, Replica: "short",
		Retention: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := short.Assert(alice, "fleet-default/c1"); err == nil || !strings.Contains(err.Error(), "not published") {
		t.Errorf("signing a token that outlives the key's publication: %v", err)
	}
	if _, _, err := short.IssueDirect(alice, "fleet-default/c1", assertion.DirectVerbs, 5*time.Second); err != nil {
		t.Errorf("a token within the publication: %v", err)
	}
}

// TestSigningKeys_NeedOnlyTheirOwnRules: the chart's rules for the keys
// alone (no other right on ConfigMaps or Secrets) let a replica publish,
// read through its informer and delete the Secret of earlier releases.
func TestSigningKeys_NeedOnlyTheirOwnRules(t *testing.T) {
	ctx := t.Context()
	up := env.Upstream
	ns := testenv.Namespace(t, up.Client, "keys-rules-")
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "fleet-proxy"}}
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-proxy"}},
		// The rules of charts/fleet/templates/proxy.yaml for the keys.
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "signing-keys"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{proxy.LegacySigningSecret}, Verbs: []string{"delete"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{proxy.SigningKeysConfigMap}, Verbs: []string{"get", "list", "watch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "signing-keys"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "signing-keys"}, Subjects: subject},
		legacySigningSecret(t, ns),
	} {
		if err := up.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := up.ServiceAccountToken(ctx, ns, "fleet-proxy", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	remember(tok)
	cs := clientset(t, up.ConfigForToken(tok))
	var keys *proxy.SigningKeys
	// RBAC bindings take a moment to be seen by the authorizer.
	testenv.Eventually(t, 30*time.Second, "the signing keys with only their rules", func() error {
		keys, err = proxy.StartSigningKeys(ctx, proxy.SigningOptions{Client: cs, Namespace: ns, Replica: "minimal"})
		return err
	})
	if _, err := keys.Assert(&authuser.DefaultInfo{Name: "alice"}, "fleet-default/c1"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the Secret of earlier releases deleted", func() error {
		err := up.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: proxy.LegacySigningSecret}, &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
}

// startKeys starts a replica's signing keys in ns until ctx ends (now: its
// clock, nil: real time).
func startKeys(t *testing.T, ctx context.Context, ns, replica string, now func() time.Time) *proxy.SigningKeys {
	t.Helper()
	k, err := proxy.StartSigningKeys(ctx, proxy.SigningOptions{Client: env.Upstream.Clientset, Namespace: ns, Replica: replica, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return k
}
