package registration

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func reg(name, clientID string) *fleet.ClusterRegistration {
	return &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: name},
		Spec:       fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: "0123456789abcdef"},
	}
}

func TestCheckToken(t *testing.T) {
	past, future := metav1.NewTime(now.Add(-time.Second)), metav1.NewTime(now.Add(time.Hour))
	deleting := metav1.NewTime(now)
	tests := []struct {
		name   string
		token  *fleet.ClusterRegistrationToken
		reason string // "" means allowed
	}{
		{"missing token", nil, fleet.TokenNotFoundReason},
		{"token being deleted", &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleting}}, fleet.TokenNotFoundReason},
		{"expired by status", &fleet.ClusterRegistrationToken{Status: fleet.ClusterRegistrationTokenStatus{Expires: &past}}, fleet.TokenExpiredReason},
		{"expires exactly now", &fleet.ClusterRegistrationToken{Status: fleet.ClusterRegistrationTokenStatus{Expires: &metav1.Time{Time: now}}}, fleet.TokenExpiredReason},
		{"expired by ttl before status was written", &fleet.ClusterRegistrationToken{
			ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-2 * time.Hour))},
			Spec:       fleet.ClusterRegistrationTokenSpec{TTL: &metav1.Duration{Duration: time.Hour}},
		}, fleet.TokenExpiredReason},
		{"valid, no expiry", &fleet.ClusterRegistrationToken{}, ""},
		{"valid, expires later", &fleet.ClusterRegistrationToken{Status: fleet.ClusterRegistrationTokenStatus{Expires: &future}}, ""},
		{"bound to this clientID", &fleet.ClusterRegistrationToken{Spec: fleet.ClusterRegistrationTokenSpec{ClientID: "cid"}}, ""},
		{"bound to another clientID", &fleet.ClusterRegistrationToken{Spec: fleet.ClusterRegistrationTokenSpec{ClientID: "other"}}, fleet.ClientIDNotAllowedReason},
		{"expired and bound elsewhere: expiry first", &fleet.ClusterRegistrationToken{
			Spec:   fleet.ClusterRegistrationTokenSpec{ClientID: "other"},
			Status: fleet.ClusterRegistrationTokenStatus{Expires: &past},
		}, fleet.TokenExpiredReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkToken(reg("request-abc", "cid"), "tok", tt.token, now)
			if tt.reason == "" {
				if got != nil {
					t.Fatalf("refused: %+v", got)
				}
				return
			}
			if got == nil || got.Reason != tt.reason {
				t.Fatalf("got %+v, want reason %s", got, tt.reason)
			}
			if !strings.Contains(got.Message, "fleet-default/tok") {
				t.Errorf("message does not name the token: %s", got.Message)
			}
			if tt.reason != fleet.ClientIDNotAllowedReason && !strings.Contains(got.Message, "create a new ClusterRegistrationToken and reinstall the agent") {
				t.Errorf("message does not say what to do: %s", got.Message)
			}
			if tt.reason == fleet.ClientIDNotAllowedReason && (!strings.Contains(got.Message, `"other"`) || !strings.Contains(got.Message, `"cid"`)) {
				t.Errorf("message does not name both clientIDs: %s", got.Message)
			}
		})
	}
}

func TestCheckRegistration_RefusesNamesThatCannotBeLabels(t *testing.T) {
	if ref := checkRegistration(reg("request-abcde", "x")); ref != nil {
		t.Fatalf("refused a generated name: %+v", ref)
	}
	ref := checkRegistration(reg(strings.Repeat("a", 64), "x"))
	if ref == nil || ref.Reason != InvalidNameReason {
		t.Fatalf("got %+v", ref)
	}
}

func requested(r *fleet.ClusterRegistration, ms int) *fleet.ClusterRegistration {
	r.Annotations = map[string]string{registration.RequestedAtAnnotation: now.Add(time.Duration(ms) * time.Millisecond).UTC().Format(time.RFC3339Nano)}
	return r
}

func TestOlderThan(t *testing.T) {
	at := func(name string, sec int, granted bool) *fleet.ClusterRegistration {
		r := reg(name, "cid")
		r.CreationTimestamp = metav1.NewTime(now.Add(time.Duration(sec) * time.Second))
		r.Status.Granted = granted
		return r
	}
	tests := []struct {
		name string
		a, b *fleet.ClusterRegistration
		want bool
	}{
		{"earlier", at("z", 0, false), at("a", 1, false), true},
		{"later", at("a", 1, true), at("z", 0, false), false},
		{"same second, granted one is older", at("z", 0, true), at("a", 0, false), true},
		{"same second, pending one is not older than a granted one", at("a", 0, false), at("z", 0, true), false},
		{"same second, both pending: by name", at("a", 0, false), at("b", 0, false), true},
		{"same second: the agent's request time decides", requested(at("z", 0, true), 2), requested(at("a", 0, false), 1), false},
		{"same second: the agent's request time decides, reversed", requested(at("a", 0, false), 1), requested(at("z", 0, true), 2), true},
		{"same second, both pending: by name, reversed", at("b", 0, false), at("a", 0, false), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := olderThan(tt.a, tt.b); got != tt.want {
				t.Fatalf("olderThan = %v, want %v", got, tt.want)
			}
			if tt.want && olderThan(tt.b, tt.a) {
				t.Fatal("order is not antisymmetric")
			}
		})
	}
}

func TestSetStatus(t *testing.T) {
	tests := []struct {
		name       string
		g          *grant
		err        error
		wantStatus metav1.ConditionStatus
		wantReason string
		granted    bool
		keep       bool
	}{
		{"granted", &grant{clusterName: "c", deploymentNamespace: "cluster-ns", secretName: "c-1"}, nil, metav1.ConditionTrue, fleet.GrantedReason, true, false},
		{"refused", &grant{}, stall(fleet.TokenNotFoundReason, "gone"), metav1.ConditionFalse, fleet.TokenNotFoundReason, false, false},
		{"waiting", &grant{}, reconciler.Wait(ClusterNameTakenReason, 0, "taken"), metav1.ConditionFalse, ClusterNameTakenReason, false, false},
		{"api error", &grant{}, errors.New("boom"), metav1.ConditionFalse, fleet.ProgressingReason, false, false},
		{"conflict keeps the condition", &grant{}, apierrors.NewConflict(schema.GroupResource{}, "x", errors.New("stale")), "", "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := reg("request-abc", "cid")
			setStatus(r, tt.g, tt.err, now)
			cond := meta.FindStatusCondition(r.Status.Conditions, fleet.GrantedCondition)
			if tt.keep {
				if cond != nil {
					t.Fatalf("condition set: %+v", cond)
				}
				return
			}
			if cond == nil || cond.Status != tt.wantStatus || cond.Reason != tt.wantReason {
				t.Fatalf("condition %+v", cond)
			}
			if r.Status.Granted != tt.granted {
				t.Fatalf("granted = %v", r.Status.Granted)
			}
			if tt.granted && (r.Status.ClusterName != "c" || !cond.LastTransitionTime.Time.Equal(now)) {
				t.Fatalf("status %+v", r.Status)
			}
		})
	}
}

func TestPickupDeadline(t *testing.T) {
	r := reg("request-abc", "cid")
	if d := pickupDeadline(r, time.Minute); !d.IsZero() {
		t.Fatalf("no condition: deadline %v, want at once", d)
	}
	setStatus(r, &grant{clusterName: "c"}, nil, now)
	if d := pickupDeadline(r, time.Minute); !d.Equal(now.Add(time.Minute)) {
		t.Fatalf("deadline %v", d)
	}
}

func TestReusable(t *testing.T) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{UID: types.UID("sa-1")}}
	secret := func(uid, token string, expires time.Time) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ServiceAccountUIDAnnotation: uid}},
			Data: map[string][]byte{
				registration.KeyToken:   []byte(token),
				registration.KeyExpires: []byte(expires.Format(time.RFC3339)),
			},
		}
	}
	tests := []struct {
		name   string
		secret *corev1.Secret
		reuse  bool
	}{
		{"no secret", nil, false},
		{"same ServiceAccount, fresh", secret("sa-1", "tok", now.Add(time.Hour)), true},
		{"ServiceAccount replaced", secret("sa-0", "tok", now.Add(time.Hour)), false},
		{"about to expire", secret("sa-1", "tok", now.Add(time.Minute)), false},
		{"empty token", secret("sa-1", "", now.Add(time.Hour)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reusable(tt.secret, sa, now); got != tt.reuse {
				t.Fatalf("reusable %v, want %v", got, tt.reuse)
			}
		})
	}
}

// signed signs r with k (request time: its creation).
func signed(t *testing.T, r *fleet.ClusterRegistration, k *registration.IdentityKey) *fleet.ClusterRegistration {
	t.Helper()
	r = r.DeepCopy()
	r.CreationTimestamp = metav1.NewTime(now)
	if r.Annotations == nil {
		r.Annotations = map[string]string{}
	}
	r.Annotations[registration.RequestedAtAnnotation] = now.Format(time.RFC3339Nano)
	if err := k.Sign(r); err != nil {
		t.Fatal(err)
	}
	return r
}

func identityKey(t *testing.T) *registration.IdentityKey {
	t.Helper()
	k, err := registration.NewIdentityKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCheckReregistration(t *testing.T) {
	owner, other := identityKey(t), identityKey(t)
	unsigned := reg("request-abc", "cid")
	byOwner, byOther := signed(t, unsigned, owner), signed(t, unsigned, other)
	generic := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "open"}}
	bound := generic.DeepCopy()
	bound.Spec.ClientID = "cid"
	manual := generic.DeepCopy()
	manual.Spec.Approval = fleet.ApprovalManual
	window := 3 * time.Minute
	cluster := func(key string, lastSeen time.Time) *fleet.Cluster {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "edge-1"}, Spec: fleet.ClusterSpec{ClientID: "cid"}}
		if key != "" {
			c.Annotations = map[string]string{fleet.AgentIdentityKeyAnnotation: key}
		}
		if !lastSeen.IsZero() {
			c.Status.Agent.LastSeen = metav1.NewTime(lastSeen)
		}
		return c
	}
	online, offline := now.Add(-time.Minute), now.Add(-window-time.Second)
	for name, tc := range map[string]struct {
		reg     *fleet.ClusterRegistration
		token   *fleet.ClusterRegistrationToken
		cluster *fleet.Cluster
		want    string // "" allowed, else a part of the refusal's message
	}{
		"new cluster, generic token":                  {reg: byOther, token: generic, cluster: nil},
		"new cluster, unsigned (older agent)":         {reg: unsigned, token: generic, cluster: nil},
		"admin registration (no token)":               {reg: unsigned, token: nil, cluster: cluster(owner.PublicKey(), online)},
		"token bound to the clientID":                 {reg: unsigned, token: bound, cluster: cluster(owner.PublicKey(), online)},
		"signed by the recorded key, online":          {reg: byOwner, token: generic, cluster: cluster(owner.PublicKey(), online)},
		"signed by the recorded key, offline":         {reg: byOwner, token: generic, cluster: cluster(owner.PublicKey(), offline)},
		"manual token (approval waited for later)":    {reg: byOther, token: manual, cluster: cluster(owner.PublicKey(), offline)},
		"legacy once: no key, registered, offline":    {reg: byOther, token: generic, cluster: cluster("", offline)},
		"legacy once, unsigned":                       {reg: unsigned, token: generic, cluster: cluster("", offline)},
		"offline takeover: another key":               {reg: byOther, token: generic, cluster: cluster(owner.PublicKey(), offline), want: "is signed by another key, " + registration.IdentityFingerprint(other.PublicKey())},
		"offline takeover: unsigned":                  {reg: unsigned, token: generic, cluster: cluster(owner.PublicKey(), offline), want: "this registration is not signed"},
		"live takeover: another key":                  {reg: byOther, token: generic, cluster: cluster(owner.PublicKey(), online), want: "holding identity key " + registration.IdentityFingerprint(owner.PublicKey())},
		"never registered (pre-created by an admin)":  {reg: byOther, token: generic, cluster: cluster("", time.Time{}), want: "no agent ever registered it"},
		"legacy, online":                              {reg: byOther, token: generic, cluster: cluster("", online), want: "checked in 1m0s ago"},
		"legacy, at the edge of the window":           {reg: byOther, token: generic, cluster: cluster("", now.Add(-window)), want: "earlier release"},
		"legacy, clock ahead: check-in in the future": {reg: byOther, token: generic, cluster: cluster("", now.Add(time.Minute)), want: "earlier release"},
		"recorded key malformed: nothing matches it":  {reg: byOwner, token: generic, cluster: cluster("not-a-key", offline), want: "is signed by another key"},
		"claimed key equals the recorded, unsigned field": {reg: func() *fleet.ClusterRegistration {
			r := unsigned.DeepCopy()
			r.Spec.IdentityPublicKey = owner.PublicKey()
			return r
		}(), token: generic, cluster: cluster(owner.PublicKey(), offline)},
	} {
		t.Run(name, func(t *testing.T) {
			ref := checkReregistration(tc.reg, tc.token, tc.cluster, window, now)
			switch {
			case tc.want == "" && ref != nil:
				t.Fatalf("refused: %+v", ref)
			case tc.want == "":
				return
			case ref == nil:
				t.Fatal("allowed")
			}
			if ref.Reason != fleet.ReregistrationRefusedReason {
				t.Errorf("reason %s", ref.Reason)
			}
			for _, w := range []string{tc.want, "edge-1", `spec.clientID: "cid" in fleet-default`, "spec.approval: Manual", `"Recovering a cluster"`} {
				if !strings.Contains(ref.Message, w) {
					t.Errorf("message %q lacks %q", ref.Message, w)
				}
			}
		})
	}
}

func TestCheckRecovery(t *testing.T) {
	owner, other := identityKey(t), identityKey(t)
	ws, name := "fleet-default", "edge-1"
	own := names.ClusterNamespace(ws, name)
	recovery := func(ns string, k *registration.IdentityKey) *fleet.ClusterRegistration {
		r := reg("request-abc", "cid")
		r.Labels = map[string]string{fleet.RecoveryNamespaceLabel: ns}
		r.Spec.CredentialPublicKey = "c2VhbGVk"
		return signed(t, r, k)
	}
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name, Annotations: map[string]string{fleet.AgentIdentityKeyAnnotation: owner.PublicKey()}},
		Spec: fleet.ClusterSpec{ClientID: "cid"}}
	noKey := cluster.DeepCopy()
	noKey.Annotations = nil
	for label, tc := range map[string]struct {
		reg     *fleet.ClusterRegistration
		cluster *fleet.Cluster
		want    string
	}{
		"its own cluster, signed by the recorded key": {reg: recovery(own, owner), cluster: cluster},
		"no Cluster of that clientID":                 {reg: recovery(own, owner), cluster: nil, want: "never creates one"},
		"another cluster's namespace":                 {reg: recovery("cluster-fleet-default-other-0123456789ab", owner), cluster: cluster, want: "has cluster namespace " + own},
		"signed by another key":                       {reg: recovery(own, other), cluster: cluster, want: "holding identity key " + registration.IdentityFingerprint(owner.PublicKey())},
		"no key recorded":                             {reg: recovery(own, owner), cluster: noKey, want: "no identity key is recorded"},
	} {
		t.Run(label, func(t *testing.T) {
			ref := checkRecovery(tc.reg, tc.cluster)
			if (ref == nil) != (tc.want == "") {
				t.Fatalf("refusal %+v, want %q", ref, tc.want)
			}
			if ref != nil && (ref.Reason != fleet.RecoveryRefusedReason || !strings.Contains(ref.Message, tc.want)) {
				t.Errorf("%+v lacks %q", ref, tc.want)
			}
		})
	}
}

func TestCheckRegistration_SignatureFirst(t *testing.T) {
	k := identityKey(t)
	good := signed(t, reg("request-abc", "cid"), k)
	if ref := checkRegistration(good); ref != nil {
		t.Fatalf("a good signature refused: %+v", ref)
	}
	if ref := checkRegistration(reg("request-abc", "cid")); ref != nil {
		t.Fatalf("an unsigned registration (older agent, admin) refused: %+v", ref)
	}
	for name, change := range map[string]func(r *fleet.ClusterRegistration){
		"tampered clientID": func(r *fleet.ClusterRegistration) { r.Spec.ClientID = "victim" },
		"replayed later":    func(r *fleet.ClusterRegistration) { r.CreationTimestamp = metav1.NewTime(now.Add(time.Hour)) },
		"bad name too: signature first": func(r *fleet.ClusterRegistration) {
			r.Name = strings.Repeat("x", 70)
		},
	} {
		r := good.DeepCopy()
		change(r)
		if ref := checkRegistration(r); ref == nil || ref.Reason != InvalidIdentitySignatureReason {
			t.Errorf("%s: %+v", name, ref)
		}
	}
	rec := good.DeepCopy()
	rec.Labels = map[string]string{fleet.RecoveryNamespaceLabel: "cluster-x"}
	if ref := checkRegistration(rec); ref == nil || ref.Reason != fleet.RecoveryRefusedReason || !strings.Contains(ref.Message, "spec.credentialPublicKey") {
		t.Errorf("a recovery registration without a credential key: %+v", ref)
	}
	unsignedRec := reg("request-abc", "cid")
	unsignedRec.Labels = rec.Labels
	ck, err := registration.NewCredentialKey()
	if err != nil {
		t.Fatal(err)
	}
	unsignedRec.Spec.CredentialPublicKey = ck.PublicKey()
	if ref := checkRegistration(unsignedRec); ref == nil || ref.Reason != fleet.RecoveryRefusedReason {
		t.Errorf("an unsigned recovery registration: %+v", ref)
	}
}

func TestCheckLimit(t *testing.T) {
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "t"}}
	if checkLimit(tok, "c") != nil {
		t.Error("a token without maxClusters refused")
	}
	two := int32(2)
	tok.Spec.MaxClusters = &two
	tok.Status.RegisteredClusters = []string{"a"}
	if checkLimit(tok, "b") != nil {
		t.Error("refused below the limit")
	}
	tok.Status.RegisteredClusters = []string{"a", "b"}
	if checkLimit(tok, "a") != nil {
		t.Error("a counted cluster refused")
	}
	if ref := checkLimit(tok, "c"); ref == nil || ref.Reason != fleet.TokenLimitReachedReason || !strings.Contains(ref.Message, "may register 2 clusters and has registered 2") {
		t.Errorf("over the limit: %+v", ref)
	}
}

func TestLabelsNote(t *testing.T) {
	r := reg("request-abc", "cid")
	r.CreationTimestamp = metav1.NewTime(now)
	r.Spec.ClusterLabels = map[string]string{"env": "prod", "region": "eu"}
	cfg := &config.Config{AgentLabelKeys: []string{"env"}}
	made := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: names.AutoClusterName("cid"), CreationTimestamp: metav1.NewTime(now.Add(time.Second))}}
	if got := labelsNote(r, made, cfg); !strings.Contains(got, `"region" (key not in agentLabelKeys)`) || strings.Contains(got, `"env"`) {
		t.Errorf("Cluster made for the registration: %q", got)
	}
	if got := labelsNote(r, made, &config.Config{}); got != "" {
		t.Errorf("every label applied, yet: %q", got)
	}
	older := made.DeepCopy()
	older.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	if got := labelsNote(r, older, cfg); !strings.Contains(got, "existed already") {
		t.Errorf("existing Cluster: %q", got)
	}
	predefined := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", CreationTimestamp: metav1.NewTime(now.Add(time.Second))}}
	if got := labelsNote(r, predefined, cfg); !strings.Contains(got, "existed already") {
		t.Errorf("predefined Cluster: %q", got)
	}
	r.Spec.ClusterLabels = nil
	if got := labelsNote(r, older, cfg); got != "" {
		t.Errorf("no labels asked for, yet: %q", got)
	}
}

func TestPendingApproval_SaysHowToApprove(t *testing.T) {
	r := reg("request-abc", "cid")
	r.Spec.ClusterLabels = map[string]string{}
	for i := range 12 {
		r.Spec.ClusterLabels[fmt.Sprintf("k%02d", i)] = "v"
	}
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "manual"}}
	w := pendingApproval(r, tok)
	if w.Reason != fleet.PendingApprovalReason || w.Event != corev1.EventTypeNormal || w.RequeueAfter != 0 {
		t.Errorf("wait %+v", w)
	}
	for _, want := range []string{`clientID "cid"`, "k00, k01", "and 2 more", "kubectl -n fleet-default annotate clusterregistrations.fleet.cattle.io request-abc fleet.cattle.io/approved=true"} {
		if !strings.Contains(w.Message, want) {
			t.Errorf("message %q lacks %q", w.Message, want)
		}
	}
}
