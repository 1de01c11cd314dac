package assertion

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/go-cmp/cmp"
)

const aud = "fleet-default/c1"

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newSigner(t testing.TB, k ed25519.PrivateKey) *Signer {
	t.Helper()
	s, err := NewSigner(k, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var alice = Identity{
	User:   "alice",
	UID:    "u-123",
	Groups: []string{"team", "system:authenticated", "system:masters"},
	Extra: map[string][]string{
		"authentication.kubernetes.io/credential-id": {"X509SHA256=abc"},
		"scopes": {"secret"},
	},
}

func TestRoundTrip(t *testing.T) {
	k := newKey(t)
	s := newSigner(t, k)
	tok, err := s.Sign(alice, aud, t0)
	if err != nil {
		t.Fatal(err)
	}
	v := NewVerifier(NewKeySet(s.PublicKey()))
	got, err := v.Verify(tok, aud, t0.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := Identity{
		User:   "alice",
		UID:    "u-123",
		Groups: []string{"system:masters", "team"},
		Extra:  map[string][]string{"authentication.kubernetes.io/credential-id": {"X509SHA256=abc"}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("identity (-want +got):\n%s", d)
	}
	// The header: alg EdDSA, kid of the key.
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatal(err)
	}
	if h := parsed.Headers[0]; h.KeyID != KeyID(s.PublicKey()) || len(h.KeyID) != 16 || h.Algorithm != "EdDSA" {
		t.Errorf("header %+v", h)
	}
	var std jwt.Claims
	if err := parsed.UnsafeClaimsWithoutVerification(&std); err != nil {
		t.Fatal(err)
	}
	if len(std.ID) != 32 || std.Expiry.Time().Sub(std.IssuedAt.Time()) != MaxLifetime || std.Issuer != Issuer {
		t.Errorf("claims %+v", std)
	}
}

// signRaw signs arbitrary claims with k under kid, for refusals the Signer
// cannot make.
func signRaw(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string, c any) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(sig).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func b64(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func TestRefusals(t *testing.T) {
	k := newKey(t)
	s := newSigner(t, k)
	kid := s.KeyID()
	other := newKey(t)
	otherSigner := newSigner(t, other)
	good := func() string {
		tok, err := s.Sign(alice, aud, t0)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	claimsAt := func(iat, exp time.Time) map[string]any {
		return map[string]any{"iss": Issuer, "sub": "alice", "aud": aud, "iat": iat.Unix(), "exp": exp.Unix(), "jti": "0123456789abcdef0123456789abcdef"}
	}
	payload := b64(claimsAt(t0, t0.Add(time.Minute)))

	cases := []struct {
		name  string
		token func() string
		aud   string
		now   time.Time
		want  error
	}{
		{name: "empty", token: func() string { return "" }},
		{name: "garbage", token: func() string { return "a.b.c" }},
		{name: "expired", token: good, now: t0.Add(MaxLifetime + Skew)},
		{name: "long expired", token: good, now: t0.Add(time.Hour)},
		{name: "issued in the future", token: good, now: t0.Add(-Skew - time.Second)},
		{name: "wrong audience", token: good, aud: "fleet-default/c2"},
		{name: "audience prefix", token: good, aud: "fleet-default/c"},
		{name: "other key", token: func() string {
			tok, _ := otherSigner.Sign(alice, aud, t0)
			return tok
		}, want: ErrUnknownKey},
		{name: "other key under our kid", token: func() string {
			return signRaw(t, jose.EdDSA, other, kid, claimsAt(t0, t0.Add(time.Minute)))
		}},
		{name: "tampered payload", token: func() string {
			parts := strings.Split(good(), ".")
			var c map[string]any
			raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
			_ = json.Unmarshal(raw, &c)
			c["sub"] = "admin"
			parts[1] = b64(c)
			return strings.Join(parts, ".")
		}},
		{name: "tampered groups", token: func() string {
			parts := strings.Split(good(), ".")
			var c map[string]any
			raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
			_ = json.Unmarshal(raw, &c)
			c["groups"] = []string{"system:masters"}
			parts[1] = b64(c)
			return strings.Join(parts, ".")
		}},
		{name: "alg none", token: func() string {
			return b64(map[string]string{"alg": "none", "kid": kid}) + "." + payload + "."
		}},
		{name: "alg none with signature", token: func() string {
			parts := strings.Split(good(), ".")
			return b64(map[string]string{"alg": "none", "kid": kid}) + "." + payload + "." + parts[2]
		}},
		{name: "HS256 with the public key as secret", token: func() string {
			return signRaw(t, jose.HS256, []byte(s.PublicKey()), kid, claimsAt(t0, t0.Add(time.Minute)))
		}},
		{name: "lifetime too long", token: func() string {
			return signRaw(t, jose.EdDSA, k, kid, claimsAt(t0, t0.Add(MaxLifetime+time.Second)))
		}},
		{name: "exp before iat", token: func() string {
			return signRaw(t, jose.EdDSA, k, kid, claimsAt(t0, t0.Add(-time.Second)))
		}},
		{name: "wrong issuer", token: func() string {
			c := claimsAt(t0, t0.Add(time.Minute))
			c["iss"] = "someone"
			return signRaw(t, jose.EdDSA, k, kid, c)
		}},
		{name: "two audiences", token: func() string {
			c := claimsAt(t0, t0.Add(time.Minute))
			c["aud"] = []string{aud, "fleet-default/c2"}
			return signRaw(t, jose.EdDSA, k, kid, c)
		}},
		{name: "no subject", token: func() string {
			c := claimsAt(t0, t0.Add(time.Minute))
			delete(c, "sub")
			return signRaw(t, jose.EdDSA, k, kid, c)
		}},
		{name: "no jti", token: func() string {
			c := claimsAt(t0, t0.Add(time.Minute))
			delete(c, "jti")
			return signRaw(t, jose.EdDSA, k, kid, c)
		}},
		{name: "no exp", token: func() string {
			c := claimsAt(t0, t0.Add(time.Minute))
			delete(c, "exp")
			return signRaw(t, jose.EdDSA, k, kid, c)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := NewVerifier(NewKeySet(s.PublicKey()))
			a, now := tc.aud, tc.now
			if a == "" {
				a = aud
			}
			if now.IsZero() {
				now = t0.Add(time.Second)
			}
			tok := tc.token()
			id, err := v.Verify(tok, a, now)
			if err == nil {
				t.Fatalf("accepted as %+v", id)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if tok != "" && strings.Contains(err.Error(), tok) {
				t.Errorf("error contains the token")
			}
		})
	}
}

func TestReplay(t *testing.T) {
	s := newSigner(t, newKey(t))
	v := NewVerifier(NewKeySet(s.PublicKey()))
	tok, _ := s.Sign(alice, aud, t0)
	if _, err := v.Verify(tok, aud, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(tok, aud, t0.Add(time.Second)); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replay: %v", err)
	}
	// A refused token does not use up its jti: a wrong audience first, then
	// the right one.
	tok2, _ := s.Sign(alice, aud, t0)
	if _, err := v.Verify(tok2, "x/y", t0); err == nil {
		t.Fatal("wrong audience accepted")
	}
	if _, err := v.Verify(tok2, aud, t0); err != nil {
		t.Fatal(err)
	}
}

func TestReplayCacheBounded(t *testing.T) {
	s := newSigner(t, newKey(t))
	v := NewVerifier(NewKeySet(s.PublicKey()))
	v.maxSeen = 3
	for i := range 3 {
		tok, _ := s.Sign(alice, aud, t0)
		if _, err := v.Verify(tok, aud, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	// Full of live jtis: refuse rather than forget one.
	tok, _ := s.Sign(alice, aud, t0)
	if _, err := v.Verify(tok, aud, t0.Add(3*time.Second)); err == nil {
		t.Fatal("accepted with a full cache")
	}
	// Once they expired they are pruned.
	later := t0.Add(2 * time.Minute)
	tok, _ = s.Sign(alice, aud, later)
	if _, err := v.Verify(tok, aud, later); err != nil {
		t.Fatal(err)
	}
	if len(v.seen) != 1 {
		t.Errorf("%d jtis remembered", len(v.seen))
	}
}

func TestKeySetJSON(t *testing.T) {
	s1, s2 := newSigner(t, newKey(t)), newSigner(t, newKey(t))
	ks := NewKeySet(s1.PublicKey(), s2.PublicKey())
	data, err := json.Marshal(ks)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), `"d"`) {
		t.Fatalf("private part in %s", data)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data, &set); err != nil || len(set.Keys) != 2 || set.Keys[0].Algorithm != "EdDSA" {
		t.Fatalf("%s: %v", data, err)
	}
	back, err := ParseKeySet(data)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(ks.KeyIDs(), back.KeyIDs()); d != "" {
		t.Error(d)
	}
	// Both keys verify (rotation).
	v := NewVerifier(back)
	for _, s := range []*Signer{s1, s2} {
		tok, _ := s.Sign(alice, aud, t0)
		if _, err := v.Verify(tok, aud, t0); err != nil {
			t.Error(err)
		}
	}
	// A wrong kid, a private key and a non-Ed25519 key are refused.
	var raw map[string][]map[string]any
	_ = json.Unmarshal(data, &raw)
	raw["keys"][0]["kid"] = "0000000000000000"
	bad, _ := json.Marshal(raw)
	if _, err := ParseKeySet(bad); err == nil {
		t.Error("wrong kid accepted")
	}
	priv := newKey(t)
	privSet, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: priv, KeyID: KeyID(priv.Public().(ed25519.PublicKey))}}})
	if _, err := ParseKeySet(privSet); err == nil {
		t.Error("private key accepted")
	}
	symSet, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: []byte("0123456789abcdef0123456789abcdef"), KeyID: "x"}}})
	if _, err := ParseKeySet(symSet); err == nil {
		t.Error("symmetric key accepted")
	}
}

func FuzzVerify(f *testing.F) {
	k := newKey(f)
	s := newSigner(f, k)
	tok, _ := s.Sign(alice, aud, t0)
	f.Add(tok)
	f.Add("")
	f.Add("a.b.c")
	f.Add(b64(map[string]string{"alg": "none"}) + "." + b64(map[string]any{"sub": "x"}) + ".")
	f.Add(strings.Replace(tok, ".", "..", 1))
	f.Fuzz(func(t *testing.T, token string) {
		v := NewVerifier(NewKeySet(s.PublicKey()))
		id, err := v.Verify(token, aud, t0)
		if err == nil && (id.User == "" || token != tok) {
			// Only the one token signed by the key can be valid.
			t.Fatalf("accepted %q as %+v", token, id)
		}
	})
}
