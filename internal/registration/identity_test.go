package registration

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

var created = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func signedReg(t *testing.T, k *IdentityKey) *fleet.ClusterRegistration {
	t.Helper()
	reg := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "fleet-default", Name: "request-0123", CreationTimestamp: metav1.NewTime(created),
			Annotations: map[string]string{RequestedAtAnnotation: created.Add(300 * time.Millisecond).Format(time.RFC3339Nano)},
		},
		Spec: fleet.ClusterRegistrationSpec{ClientID: "edge-1", ClientRandom: "0123456789abcdef0123", CredentialPublicKey: "Y3JlZGVudGlhbC1rZXk="},
	}
	if err := k.Sign(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestVerifyRegistration(t *testing.T) {
	k, err := NewIdentityKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewIdentityKey()
	for name, tc := range map[string]struct {
		change func(r *fleet.ClusterRegistration)
		want   string // "" verifies
	}{
		"as signed":             {change: func(*fleet.ClusterRegistration) {}},
		"labels are not signed": {change: func(r *fleet.ClusterRegistration) { r.Spec.ClusterLabels = map[string]string{"env": "x"} }},
		"request time 9m after": {change: func(r *fleet.ClusterRegistration) {
			r.CreationTimestamp = metav1.NewTime(created.Add(-9 * time.Minute))
		}},
		"request time 9m before": {change: func(r *fleet.ClusterRegistration) { r.CreationTimestamp = metav1.NewTime(created.Add(9 * time.Minute)) }},
		"another namespace":      {change: func(r *fleet.ClusterRegistration) { r.Namespace = "fleet-other" }, want: "does not verify"},
		"another name":           {change: func(r *fleet.ClusterRegistration) { r.Name = "request-0124" }, want: "does not verify"},
		"another clientID":       {change: func(r *fleet.ClusterRegistration) { r.Spec.ClientID = "edge-2" }, want: "does not verify"},
		"another clientRandom":   {change: func(r *fleet.ClusterRegistration) { r.Spec.ClientRandom += "0" }, want: "does not verify"},
		"another credential key": {change: func(r *fleet.ClusterRegistration) { r.Spec.CredentialPublicKey = "b3RoZXI=" }, want: "does not verify"},
		"credential key dropped": {change: func(r *fleet.ClusterRegistration) { r.Spec.CredentialPublicKey = "" }, want: "does not verify"},
		"another request time": {change: func(r *fleet.ClusterRegistration) {
			r.Annotations[RequestedAtAnnotation] = created.Format(time.RFC3339Nano)
		}, want: "does not verify"},
		"request time missing": {change: func(r *fleet.ClusterRegistration) { delete(r.Annotations, RequestedAtAnnotation) }, want: "annotation fleet.cattle.io/requested-at"},
		"another key claimed":  {change: func(r *fleet.ClusterRegistration) { r.Spec.IdentityPublicKey = other.PublicKey() }, want: "does not verify"},
		"key not base64":       {change: func(r *fleet.ClusterRegistration) { r.Spec.IdentityPublicKey = "not base64!" }, want: "32-byte Ed25519 public key"},
		"key too short":        {change: func(r *fleet.ClusterRegistration) { r.Spec.IdentityPublicKey = "AAAA" }, want: "32-byte Ed25519 public key"},
		"no signature":         {change: func(r *fleet.ClusterRegistration) { r.Spec.IdentitySignature = "" }, want: "64-byte Ed25519 signature"},
		"signature truncated":  {change: func(r *fleet.ClusterRegistration) { r.Spec.IdentitySignature = r.Spec.IdentitySignature[:40] }, want: "64-byte Ed25519 signature"},
		"replayed: created 11m later": {change: func(r *fleet.ClusterRegistration) {
			r.CreationTimestamp = metav1.NewTime(created.Add(11 * time.Minute))
		}, want: "at most 10m0s"},
		"request time 11m ahead": {change: func(r *fleet.ClusterRegistration) {
			r.CreationTimestamp = metav1.NewTime(created.Add(-11 * time.Minute))
		}, want: "check the clocks"},
	} {
		t.Run(name, func(t *testing.T) {
			reg := signedReg(t, k)
			tc.change(reg)
			err := VerifyRegistration(reg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The signed fields are length-prefixed: moving bytes from one field into
// the next changes the message.
func TestSignedMessage_FieldsCannotRunIntoEachOther(t *testing.T) {
	a := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Namespace: "ab", Name: "c"}}
	b := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "bc"}}
	if bytes.Equal(signedMessage(a), signedMessage(b)) {
		t.Fatal("two registrations with different fields sign the same message")
	}
	if !bytes.HasPrefix(signedMessage(a), []byte(signatureContext)) {
		t.Fatal("the message does not start with its context")
	}
}

func TestIdentityKey_SeedRoundTripsAndBadSeedsAreRefused(t *testing.T) {
	k, err := NewIdentityKey()
	if err != nil {
		t.Fatal(err)
	}
	again, err := IdentityKeyFromSeed(k.Seed())
	if err != nil || again.PublicKey() != k.PublicKey() {
		t.Fatalf("seed round trip: %v, %s vs %s", err, again.PublicKey(), k.PublicKey())
	}
	for _, seed := range [][]byte{nil, make([]byte, 31), make([]byte, 64)} {
		if _, err := IdentityKeyFromSeed(seed); err == nil || !strings.Contains(err.Error(), "32-byte Ed25519 seed") {
			t.Errorf("seed of %d bytes: %v", len(seed), err)
		}
	}
	if err := k.Sign(&fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "request-1"}}); err == nil {
		t.Error("signed a registration without a request time")
	}
}

func TestIdentityFingerprint_ShortAndStable(t *testing.T) {
	k, _ := NewIdentityKey()
	fp := IdentityFingerprint(k.PublicKey())
	if !strings.HasPrefix(fp, "sha256:") || len(fp) != len("sha256:")+16 || fp != IdentityFingerprint(k.PublicKey()) {
		t.Errorf("fingerprint %q", fp)
	}
	if IdentityFingerprint("not base64!") == "" {
		t.Error("no fingerprint for a malformed key")
	}
}

// FuzzVerifyRegistration: whatever a token holder puts into the signed
// fields, verifying never panics, and only the key's own signature over
// exactly those fields verifies.
func FuzzVerifyRegistration(f *testing.F) {
	k, err := NewIdentityKey()
	if err != nil {
		f.Fatal(err)
	}
	f.Add("edge-1", "0123456789abcdef", "a2V5", created.Format(time.RFC3339Nano), k.PublicKey(), "")
	f.Add("", "", "", "", "", "AAAA")
	f.Fuzz(func(t *testing.T, clientID, random, credKey, requestedAt, pub, sig string) {
		reg := &fleet.ClusterRegistration{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "request-x", CreationTimestamp: metav1.NewTime(created),
				Annotations: map[string]string{RequestedAtAnnotation: requestedAt}},
			Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: random, CredentialPublicKey: credKey, IdentityPublicKey: pub, IdentitySignature: sig},
		}
		if VerifyRegistration(reg) == nil && pub == k.PublicKey() {
			t.Fatalf("a signature not made by the key verified: %+v", reg.Spec)
		}
		if requestedAt == "" {
			return
		}
		if err := k.Sign(reg); err != nil {
			t.Fatal(err)
		}
		at, perr := time.Parse(time.RFC3339Nano, requestedAt)
		inWindow := perr == nil && at.Sub(created).Abs() <= RequestTimeWindow
		if err := VerifyRegistration(reg); (err == nil) != inWindow {
			t.Fatalf("signed registration with request time %q: %v", requestedAt, err)
		}
	})
}
