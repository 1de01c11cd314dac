package token

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
)

// seenBearers collects every bearer token the tests read, for
// TestToken_NeverLogsBearerToken.
var seenBearers struct {
	sync.Mutex
	tokens []string
}

func createToken(t *testing.T, ns, name, ttl, clientID string) *fleet.ClusterRegistrationToken {
	t.Helper()
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	tok.Spec.ClientID = clientID
	if ttl != "" {
		d, err := time.ParseDuration(ttl)
		if err != nil {
			t.Fatal(err)
		}
		tok.Spec.TTL = &metav1.Duration{Duration: d}
	}
	if err := env.Upstream.Client.Create(t.Context(), tok); err != nil {
		t.Fatalf("creating ClusterRegistrationToken %s/%s: %v", ns, name, err)
	}
	return tok
}

// waitReady waits until the token is Ready and its values Secret holds a
// bearer token; it returns both.
func waitReady(t *testing.T, ns, name string) (*fleet.ClusterRegistrationToken, *corev1.Secret, *agentvalues.Values) {
	t.Helper()
	c := env.Upstream.Client
	tok := &fleet.ClusterRegistrationToken{}
	secret := &corev1.Secret{}
	var vals *agentvalues.Values
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("ClusterRegistrationToken %s/%s Ready with a values Secret", ns, name), func() (bool, error) {
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, tok); err != nil {
			return false, err
		}
		if !meta.IsStatusConditionTrue(tok.Status.Conditions, fleet.ReadyCondition) || tok.Status.SecretName == "" {
			return false, fmt.Errorf("status %+v", tok.Status)
		}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: tok.Status.SecretName}, secret); err != nil {
			return false, err
		}
		v, err := agentvalues.Parse(secret.Data[ValuesKey])
		if err != nil {
			return false, err
		}
		vals = v
		return v.Token != "", errors.New("no token in values")
	})
	seenBearers.Lock()
	seenBearers.tokens = append(seenBearers.tokens, vals.Token)
	seenBearers.Unlock()
	return tok, secret, vals
}

func mustOwn(t *testing.T, tok *fleet.ClusterRegistrationToken, obj client.Object) {
	t.Helper()
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.UID != tok.UID || ref.Kind != "ClusterRegistrationToken" {
		t.Errorf("%T %s: controller owner %+v, want the token %s (uid %s)", obj, obj.GetName(), ref, tok.Name, tok.UID)
	}
	if obj.GetLabels()[fleet.ManagedLabel] != "true" {
		t.Errorf("%T %s: labels %v lack %s=true", obj, obj.GetName(), obj.GetLabels(), fleet.ManagedLabel)
	}
}

func TestToken_CreatesImportIdentityAndValuesSecret(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, env.Upstream.Client, "token-create-")
	created := createToken(t, ns, "reg", "1h", "")
	tok, secret, vals := waitReady(t, ns, "reg")

	name := ImportServiceAccountName("reg")
	sa := &corev1.ServiceAccount{}
	role := &rbacv1.Role{}
	rb := &rbacv1.RoleBinding{}
	for _, o := range []client.Object{sa, role, rb} {
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, o); err != nil {
			t.Fatalf("%T %s/%s: %v", o, ns, name, err)
		}
		mustOwn(t, tok, o)
	}
	mustOwn(t, tok, secret)

	for _, o := range []client.Object{sa, role, rb, secret} {
		if !slices.ContainsFunc(o.GetManagedFields(), func(m metav1.ManagedFieldsEntry) bool { return m.Manager == FieldManager }) {
			t.Errorf("%T %s: no managedFields entry of %s", o, o.GetName(), FieldManager)
		}
	}
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount automountServiceAccountToken = %v, want false", sa.AutomountServiceAccountToken)
	}
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusterregistrations"}, Verbs: []string{"create", "get"}}}
	if fmt.Sprint(role.Rules) != fmt.Sprint(wantRules) {
		t.Errorf("Role rules = %+v, want exactly %+v", role.Rules, wantRules)
	}
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}) {
		t.Errorf("RoleBinding roleRef = %+v", rb.RoleRef)
	}
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}; fmt.Sprint(rb.Subjects) != fmt.Sprint(want) {
		t.Errorf("RoleBinding subjects = %+v, want %+v", rb.Subjects, want)
	}

	if secret.Name != "reg" || secret.Type != corev1.SecretTypeOpaque || len(secret.Data) != 1 {
		t.Errorf("values Secret %s type %s keys %d, want reg, Opaque, only %q", secret.Name, secret.Type, len(secret.Data), ValuesKey)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(secret.Data[ValuesKey], &doc); err != nil {
		t.Fatalf("values are not YAML: %v", err)
	}
	want := map[string]any{
		"apiServerURL":                "https://upstream.example.com:6443",
		"apiServerCA":                 "ca-pem",
		"clusterNamespace":            ns,
		"systemRegistrationNamespace": "cattle-fleet-clusters-system",
		"token":                       vals.Token,
		"tokenName":                   "reg",
		"clientID":                    "",
		"bootstrap":                   map[string]any{"enabled": true},
		// The controller's agent settings, so a helm-installed agent runs
		// what its Bundle applies later (defaults here).
		"agentTLSMode":    "system-store",
		"checkinInterval": "1m",
		"image":           map[string]any{"repository": "gitops-fleet/fleet", "tag": "0.1.0", "imagePullPolicy": "IfNotPresent"},
		"replicas":        float64(1),
		"leaderElection":  map[string]any{"leaseDuration": "30s", "renewDeadline": "25s", "retryPeriod": "10s"},
	}
	for k, w := range want {
		if diff := cmp.Diff(w, doc[k]); diff != "" {
			t.Errorf("values %s (-want +got):\n%s", k, diff)
		}
	}
	// It is the one agent values type, built for this token: nothing else.
	fromToken, err := agentvalues.ForToken(tok, initialConfig(), vals.Token)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fromToken, vals); diff != "" {
		t.Errorf("values Secret differs from agentvalues.ForToken (-want +got):\n%s", diff)
	}
	if vals.Token == "" || vals.APIServerURL != want["apiServerURL"] || vals.ClusterNamespace != ns {
		t.Errorf("values = %+v", vals)
	}
	for _, a := range []string{TokenExpiresAnnotation, TokenIssuedAnnotation, TokenServiceAccountUIDAnnotation} {
		if secret.Annotations[a] == "" {
			t.Errorf("values Secret lacks annotation %s", a)
		}
	}

	if tok.Status.SecretName != "reg" {
		t.Errorf("status.secretName = %q, want reg", tok.Status.SecretName)
	}
	wantExpires := created.CreationTimestamp.Add(time.Hour)
	if tok.Status.Expires == nil || !tok.Status.Expires.Time.Equal(wantExpires) {
		t.Errorf("status.expires = %v, want creation + ttl = %v", tok.Status.Expires, wantExpires)
	}
	ready := meta.FindStatusCondition(tok.Status.Conditions, fleet.ReadyCondition)
	if ready.Reason != fleet.SucceededReason || ready.ObservedGeneration != tok.Generation || !strings.Contains(ready.Message, "helm install fleet-agent") {
		t.Errorf("Ready condition = %+v", ready)
	}

	// A token bound to one cluster carries its clientID; one without TTL
	// never expires.
	createToken(t, ns, "bound", "", "my-cluster")
	bound, _, bvals := waitReady(t, ns, "bound")
	if bvals.ClientID != "my-cluster" {
		t.Errorf("values clientID = %q, want my-cluster", bvals.ClientID)
	}
	if bound.Status.Expires != nil {
		t.Errorf("status.expires = %v for a token without TTL, want none", bound.Status.Expires)
	}
}

// TestToken_ImportIdentityCanOnlyCreateAndGetClusterRegistrations: the
// import identity creates registrations in its token's namespace and reads
// one by its name (its answer is in its status), nothing more.
func TestToken_ImportIdentityCanOnlyCreateAndGetClusterRegistrations(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "token-rbac-")
	other := testenv.Namespace(t, env.Upstream.Client, "token-rbac-other-")
	createToken(t, ns, "reg", "1h", "")
	_, _, vals := waitReady(t, ns, "reg")

	asImport, err := client.NewWithWatch(env.Upstream.ConfigForToken(vals.Token), client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	newReg := func(namespace string) *fleet.ClusterRegistration {
		return &fleet.ClusterRegistration{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "request-",
				Labels: map[string]string{fleet.RegistrationTokenLabel: "reg"}},
			Spec: fleet.ClusterRegistrationSpec{ClientID: "client-1", ClientRandom: "0123456789abcdef0123"},
		}
	}
	// The admission policy ties a registration to the token whose identity
	// made it: a missing or false token label is refused.
	unlabelled := newReg(ns)
	unlabelled.Labels = nil
	testenv.Eventually(t, 10*time.Second, "a registration without the token label to be refused", func() (bool, error) {
		err := asImport.Create(t.Context(), unlabelled)
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), err
	})
	forged := newReg(ns)
	forged.Labels[fleet.RegistrationTokenLabel] = "some-other-token"
	if err := asImport.Create(t.Context(), forged); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("a registration claiming another token was not refused: %v", err)
	}
	reg := newReg(ns)
	testenv.Eventually(t, 10*time.Second, "the import identity to create a ClusterRegistration", func() (bool, error) {
		err := asImport.Create(t.Context(), reg)
		return err == nil, err
	})

	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: want Forbidden, got %v", what, err)
		}
	}
	ctx := t.Context()
	if err := asImport.Get(ctx, client.ObjectKeyFromObject(reg), &fleet.ClusterRegistration{}); err != nil {
		t.Errorf("get the ClusterRegistration it made: %v", err)
	}
	forbidden("update ClusterRegistration status", asImport.Status().Update(ctx, reg))
	forbidden("get ClusterRegistration in another namespace", asImport.Get(ctx, client.ObjectKey{Namespace: other, Name: reg.Name}, &fleet.ClusterRegistration{}))
	forbidden("list ClusterRegistrations", asImport.List(ctx, &fleet.ClusterRegistrationList{}, client.InNamespace(ns)))
	_, err = asImport.Watch(ctx, &fleet.ClusterRegistrationList{}, client.InNamespace(ns))
	forbidden("watch ClusterRegistrations", err)
	upd := reg.DeepCopy()
	upd.Labels = map[string]string{"x": "y"}
	forbidden("update ClusterRegistration", asImport.Update(ctx, upd))
	forbidden("delete ClusterRegistration", asImport.Delete(ctx, reg))
	forbidden("create ClusterRegistration in another namespace", asImport.Create(ctx, newReg(other)))
	forbidden("list Secrets", asImport.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)))
	forbidden("list Secrets cluster-wide", asImport.List(ctx, &corev1.SecretList{}))
	forbidden("get values Secret", asImport.Get(ctx, client.ObjectKey{Namespace: ns, Name: "reg"}, &corev1.Secret{}))
	forbidden("list Clusters", asImport.List(ctx, &fleet.ClusterList{}, client.InNamespace(ns)))
	forbidden("list BundleDeployments", asImport.List(ctx, &fleet.BundleDeploymentList{}))
	forbidden("create Cluster", asImport.Create(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "evil"}}))
	forbidden("create ClusterRegistrationToken", asImport.Create(ctx, &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "more"}}))
}

func TestToken_ExpiryDeletesTokenAndEverythingItMade(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, env.Upstream.Client, "token-expiry-")
	createToken(t, ns, "short", "3s", "")

	// Read the bearer token while it lives.
	var bearer string
	var expires time.Time
	testenv.Eventually(t, 10*time.Second, "values Secret with a token and status.expires", func() (bool, error) {
		tok := &fleet.ClusterRegistrationToken{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "short"}, tok); err != nil {
			return false, err
		}
		s := &corev1.Secret{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "short"}, s); err != nil {
			return false, err
		}
		v, err := agentvalues.Parse(s.Data[ValuesKey])
		if err != nil || tok.Status.Expires == nil {
			return false, err
		}
		bearer, expires = v.Token, tok.Status.Expires.Time
		return bearer != "", nil
	})
	seenBearers.Lock()
	seenBearers.tokens = append(seenBearers.tokens, bearer)
	seenBearers.Unlock()

	testenv.Eventually(t, 20*time.Second, "the expired token to be deleted", func() (bool, error) {
		err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "short"}, &fleet.ClusterRegistrationToken{})
		return apierrors.IsNotFound(err), err
	})
	if now := time.Now(); now.Before(expires) {
		t.Errorf("token deleted at %s, before status.expires %s", now, expires)
	} else if now.After(expires.Add(5 * time.Second)) {
		t.Errorf("token deleted at %s, more than 5s after status.expires %s: not requeued at expiry", now, expires)
	}

	name := ImportServiceAccountName("short")
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "short"}},
	} {
		testenv.Eventually(t, 20*time.Second, fmt.Sprintf("%T %s to be garbage-collected", o, o.GetName()), func() (bool, error) {
			err := c.Get(t.Context(), client.ObjectKeyFromObject(o), o)
			return apierrors.IsNotFound(err), err
		})
	}

	asImport, err := client.New(env.Upstream.ConfigForToken(bearer), client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	err = asImport.Create(t.Context(), &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "request-"},
		Spec:       fleet.ClusterRegistrationSpec{ClientID: "client-1", ClientRandom: "0123456789abcdef0123"},
	})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("request with the expired token's bearer token: want 401 Unauthorized, got %v", err)
	}
	waitEvent(t, ns, "short", ExpiredReason, "expired")
}

// waitEvent waits for an event about a token with the given reason whose note
// contains noteHas.
func waitEvent(t *testing.T, ns, name, reason, noteHas string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("event %s on ClusterRegistrationToken %s/%s", reason, ns, name), func() (bool, error) {
		list := &eventsv1.EventList{}
		if err := env.Upstream.Client.List(t.Context(), list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Regarding.Kind == "ClusterRegistrationToken" && e.Reason == reason && strings.Contains(e.Note, noteHas) {
				return true, nil
			}
		}
		return false, fmt.Errorf("%d events, none matching", len(list.Items))
	})
}

func TestToken_TTLRequiredDeletesTokensWithoutTTL(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, env.Upstream.Client, "token-ttlreq-")
	createToken(t, ns, "forever", "", "")
	waitReady(t, ns, "forever")

	cfg := initialConfig()
	cfg.RegistrationTokenTTLRequired = true
	store.Set(cfg)
	t.Cleanup(func() { store.Set(initialConfig()) })

	// The configuration change alone reaches the existing token.
	testenv.Eventually(t, 10*time.Second, "the token without TTL to be deleted after the config change", func() (bool, error) {
		err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "forever"}, &fleet.ClusterRegistrationToken{})
		return apierrors.IsNotFound(err), err
	})
	waitEvent(t, ns, "forever", TTLRequiredReason, "spec.ttl")

	// New tokens without TTL ("0" included) go too; one with a TTL stays.
	createToken(t, ns, "zero", "0s", "")
	createToken(t, ns, "bounded", "1h", "")
	testenv.Eventually(t, 10*time.Second, "the token with ttl 0 to be deleted", func() (bool, error) {
		err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "zero"}, &fleet.ClusterRegistrationToken{})
		return apierrors.IsNotFound(err), err
	})
	waitEvent(t, ns, "zero", TTLRequiredReason, "spec.ttl")
	waitReady(t, ns, "bounded")
}

func TestToken_BadTTLRejectedByAPIServer(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "token-badttl-")
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "fleet.cattle.io/v1alpha1",
		"kind":       "ClusterRegistrationToken",
		"metadata":   map[string]any{"namespace": ns, "name": "days"},
		"spec":       map[string]any{"ttl": "1d"},
	}}
	err := env.Upstream.Client.Create(t.Context(), u)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "ttl must be a Go duration") {
		t.Fatalf("ttl 1d: want Invalid saying the ttl must be a Go duration, got %v", err)
	}
}

func TestToken_NoWritesWhenNothingChanged(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, env.Upstream.Client, "token-nowrite-")
	createToken(t, ns, "steady", "", "")
	tok, secret, vals := waitReady(t, ns, "steady")
	// Let the passes that follow the first writes settle.
	time.Sleep(time.Second)
	tok, secret, vals = waitReady(t, ns, "steady")

	name := ImportServiceAccountName("steady")
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "steady"}},
	}
	versions := map[string]string{}
	for _, o := range objs {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		versions[fmt.Sprintf("%T", o)] = o.GetResourceVersion()
	}

	// Five metadata changes of the token and an unchanged configuration each
	// trigger a pass.
	for i := range 5 {
		before := reconcileCount(t)
		patch := client.MergeFrom(tok.DeepCopy())
		if tok.Annotations == nil {
			tok.Annotations = map[string]string{}
		}
		tok.Annotations["example.com/poke"] = fmt.Sprint(i)
		if err := c.Patch(t.Context(), tok, patch); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("a reconcile after annotation change %d", i), func() (bool, error) {
			return reconcileCount(t) > before, nil
		})
	}
	before := reconcileCount(t)
	store.Set(initialConfig())
	testenv.Eventually(t, 10*time.Second, "a reconcile after setting the same configuration", func() (bool, error) {
		return reconcileCount(t) > before, nil
	})
	time.Sleep(500 * time.Millisecond)

	for _, o := range objs {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		if k := fmt.Sprintf("%T", o); o.GetResourceVersion() != versions[k] {
			t.Errorf("%s %s was written (resourceVersion %s → %s) though nothing changed", k, o.GetName(), versions[k], o.GetResourceVersion())
		}
	}
	after, s2, v2 := waitReady(t, ns, "steady")
	if v2.Token != vals.Token {
		t.Error("the bearer token was minted again though nothing changed")
	}
	if s2.ResourceVersion != secret.ResourceVersion {
		t.Errorf("values Secret resourceVersion %s → %s", secret.ResourceVersion, s2.ResourceVersion)
	}
	if fmt.Sprint(after.Status) != fmt.Sprint(tok.Status) {
		t.Errorf("status changed though nothing changed:\n%+v\n%+v", tok.Status, after.Status)
	}
	if after.Generation != tok.Generation {
		t.Errorf("generation %d → %d", tok.Generation, after.Generation)
	}
}

func TestToken_ConfigChangeRewritesValuesKeepingToken(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "token-config-")
	createToken(t, ns, "reg", "2h", "")
	_, secret, vals := waitReady(t, ns, "reg")

	cfg := initialConfig()
	cfg.APIServerURL = "https://moved.example.com:443"
	cfg.APIServerCA = []byte("new-ca-pem")
	store.Set(cfg)
	t.Cleanup(func() { store.Set(initialConfig()) })

	var now *agentvalues.Values
	s := &corev1.Secret{}
	testenv.Eventually(t, 10*time.Second, "the values to carry the new apiServerURL and CA", func() (bool, error) {
		if err := env.Upstream.Client.Get(t.Context(), client.ObjectKeyFromObject(secret), s); err != nil {
			return false, err
		}
		v, err := agentvalues.Parse(s.Data[ValuesKey])
		if err != nil {
			return false, err
		}
		now = v
		return v.APIServerURL == cfg.APIServerURL && v.APIServerCA == "new-ca-pem", nil
	})
	if now.Token != vals.Token {
		t.Error("the bearer token changed with the configuration; it must be kept")
	}
	for _, a := range []string{TokenIssuedAnnotation, TokenExpiresAnnotation} {
		if s.Annotations[a] != secret.Annotations[a] {
			t.Errorf("annotation %s %q → %q", a, secret.Annotations[a], s.Annotations[a])
		}
	}
}

func TestToken_DeletedValuesSecretIsRemadeWithNewToken(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, env.Upstream.Client, "token-remake-")
	createToken(t, ns, "reg", "1h", "")
	_, secret, vals := waitReady(t, ns, "reg")
	if err := c.Delete(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	var remade *agentvalues.Values
	testenv.Eventually(t, 10*time.Second, "a new values Secret", func() (bool, error) {
		s := &corev1.Secret{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(secret), s); err != nil {
			return false, err
		}
		v, err := agentvalues.Parse(s.Data[ValuesKey])
		if err != nil {
			return false, err
		}
		remade = v
		return s.UID != secret.UID && v.Token != "", nil
	})
	seenBearers.Lock()
	seenBearers.tokens = append(seenBearers.tokens, remade.Token)
	seenBearers.Unlock()
	if remade.Token == vals.Token {
		t.Fatal("the new values Secret carries the old token")
	}
	// The old token was bound to the deleted Secret: it is revoked.
	old, err := client.New(env.Upstream.ConfigForToken(vals.Token), client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the old bearer token to be rejected", func() (bool, error) {
		err := old.Create(t.Context(), &fleet.ClusterRegistration{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "request-"},
			Spec:       fleet.ClusterRegistrationSpec{ClientID: "client-1", ClientRandom: "0123456789abcdef0123"},
		})
		return apierrors.IsUnauthorized(err), err
	})
}

func TestToken_WidenedRoleIsReverted(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, env.Upstream.Client, "token-drift-")
	createToken(t, ns, "reg", "1h", "")
	waitReady(t, ns, "reg")
	role := &rbacv1.Role{}
	key := client.ObjectKey{Namespace: ns, Name: ImportServiceAccountName("reg")}
	if err := c.Get(t.Context(), key, role); err != nil {
		t.Fatal(err)
	}
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}})
	if err := c.Update(t.Context(), role); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the Role to allow only creating and getting clusterregistrations again", func() (bool, error) {
		if err := c.Get(t.Context(), key, role); err != nil {
			return false, err
		}
		return len(role.Rules) == 1 && fmt.Sprint(role.Rules[0].Verbs) == "[create get]", fmt.Errorf("rules %+v", role.Rules)
	})
}

func TestToken_ForeignSecretIsNotTaken(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, env.Upstream.Client, "token-foreign-")
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"}, StringData: map[string]string{"mine": "yes"}}
	if err := c.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	createToken(t, ns, "taken", "1h", "")
	testenv.Eventually(t, 10*time.Second, "Ready=False naming the conflicting Secret", func() (bool, error) {
		tok := &fleet.ClusterRegistrationToken{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "taken"}, tok); err != nil {
			return false, err
		}
		ready := meta.FindStatusCondition(tok.Status.Conditions, fleet.ReadyCondition)
		return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == ObjectConflictReason &&
			strings.Contains(ready.Message, "Secret "+ns+"/taken"), fmt.Errorf("conditions %+v", tok.Status.Conditions)
	})
	s := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(foreign), s); err != nil {
		t.Fatal(err)
	}
	if string(s.Data["mine"]) != "yes" || len(s.Data) != 1 || len(s.OwnerReferences) != 0 {
		t.Errorf("the foreign Secret was modified: %v %v", s.Data, s.OwnerReferences)
	}
}

// TestToken_NeverLogsBearerToken runs last: no bearer token any test saw
// appears in what the controller logged.
func TestToken_NeverLogsBearerToken(t *testing.T) {
	seenBearers.Lock()
	defer seenBearers.Unlock()
	if len(seenBearers.tokens) == 0 {
		t.Skip("no test read a bearer token")
	}
	out := logs.String()
	if out == "" {
		t.Fatal("the controller logged nothing; the check would prove nothing")
	}
	for _, b := range seenBearers.tokens {
		if b != "" && strings.Contains(out, b) {
			t.Fatal("a bearer token appears in the controller's logs")
		}
	}
}

func TestToken_ApprovalAndLimitFieldsValidatedAndLimitStatusKept(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, env.Upstream.Client, "token-policy-")
	for spec, want := range map[string]string{
		`{"approval": "Sometimes"}`: `supported values: "Automatic", "Manual"`,
		`{"maxClusters": 0}`:        "should be greater than or equal to 1",
		`{"maxClusters": 1001}`:     "should be less than or equal to 1000",
	} {
		var m map[string]any
		if err := json.Unmarshal([]byte(spec), &m); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "fleet.cattle.io/v1alpha1",
			"kind":       "ClusterRegistrationToken",
			"metadata":   map[string]any{"namespace": ns, "generateName": "bad-"},
			"spec":       m,
		}}
		if err := c.Create(t.Context(), u); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("spec %s: want Invalid with %q, got %v", spec, want, err)
		}
	}

	createToken(t, ns, "limited", "", "")
	tok, _, _ := waitReady(t, ns, "limited")
	if tok.Spec.Approval != fleet.ApprovalAutomatic || tok.Spec.GetApproval() != fleet.ApprovalAutomatic {
		t.Errorf("approval defaults to %q", tok.Spec.Approval)
	}
	// The grant records registered clusters in the status; the token
	// controller's own status writes keep them.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"registeredClusters":["cluster-a","cluster-b"]}}`))
	if err := c.Status().Patch(t.Context(), tok, patch); err != nil {
		t.Fatal(err)
	}
	cfg := initialConfig()
	cfg.APIServerURL = ""
	store.Set(cfg)
	t.Cleanup(func() { store.Set(initialConfig()) })
	testenv.Eventually(t, 10*time.Second, "the token controller to write its status", func() (bool, error) {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(tok), tok); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(tok.Status.Conditions, fleet.ReadyCondition)
		return cond != nil && cond.Reason == fleet.MissingAPIServerURLReason, fmt.Errorf("status %+v", tok.Status)
	})
	if !slices.Equal(tok.Status.RegisteredClusters, []string{"cluster-a", "cluster-b"}) {
		t.Errorf("status.registeredClusters %v after the token controller wrote the status", tok.Status.RegisteredClusters)
	}
}
