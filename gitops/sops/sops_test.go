package sops

import (
	"errors"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"
)

func identity(t testing.TB) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// open loads, opens and decrypts an encrypted file.
func open(t testing.TB, path string, enc []byte, ids ...age.Identity) (*File, error) {
	t.Helper()
	f, err := Load(path, enc)
	if err != nil {
		return nil, err
	}
	key, err := f.DataKey(ids...)
	if err != nil {
		return nil, err
	}
	return f, f.Decrypt(key)
}

func mustEncrypt(t testing.TB, path string, plain string, r Rules, recipients ...string) []byte {
	t.Helper()
	enc, err := Encrypt(path, []byte(plain), r, recipients...)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

const secret = `apiVersion: v1
kind: Secret
metadata:
  name: dev-1-kubeconfig
  labels:
    team: a
stringData:
  value: |
    apiVersion: v1
    clusters: []
  count: "3"
data:
  token: c2VjcmV0
---
apiVersion: fleet.cattle.io/v1alpha1
kind: Cluster
metadata:
  name: dev-1
spec:
  kubeConfigSecret: dev-1-kubeconfig
  paused: false
  redeployAgentGeneration: 2
  ratio: 0.5
  when: 2015-01-01
  nothing: null
  list: [a, 1, true, {k: v}]
`

func TestRoundTrip_EveryRuleAndType(t *testing.T) {
	id := identity(t)
	plain, err := loadYAML([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]Rules{
		"default":             {},
		"encrypted regex":     {EncryptedRegex: "^(data|stringData)$"},
		"mac only encrypted":  {EncryptedRegex: "^(data|stringData)$", MACOnlyEncrypted: true},
		"unencrypted regex":   {UnencryptedRegex: "^(apiVersion|kind|metadata)$"},
		"encrypted suffix":    {EncryptedSuffix: "Data"},
		"unencrypted suffix":  {UnencryptedSuffix: "Version"},
		"json default":        {},
		"json encrypted rule": {EncryptedRegex: "^spec$"},
	} {
		t.Run(name, func(t *testing.T) {
			path := "f.yaml"
			want := plain
			in := secret
			if strings.HasPrefix(name, "json") {
				path = "f.json"
				b, err := emitJSON(plain[1])
				if err != nil {
					t.Fatal(err)
				}
				in = string(b)
				if want, err = loadJSON(b); err != nil { // JSON has no time: it is a string
					t.Fatal(err)
				}
			}
			enc := mustEncrypt(t, path, in, r, id.Recipient().String())
			f, err := open(t, path, enc, id)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, f.Docs); d != "" {
				t.Fatalf("decrypted documents differ (-want +got):\n%s", d)
			}
		})
	}
}

func TestEncrypt_RulesDecideWhatIsCiphertext(t *testing.T) {
	id := identity(t)
	enc := mustEncrypt(t, "s.yaml", secret, Rules{EncryptedRegex: "^(data|stringData)$"}, id.Recipient().String())
	f, err := Load("s.yaml", enc)
	if err != nil {
		t.Fatal(err)
	}
	sd := f.Docs[0].Get("stringData").(Branch)
	if !IsEncrypted(sd.Get("value")) || !IsEncrypted(f.Docs[0].Get("data").(Branch).Get("token")) {
		t.Fatalf("values under data and stringData are not encrypted: %v", f.Docs[0])
	}
	if f.Docs[0].Get("kind") != "Secret" || f.Docs[1].Get("spec").(Branch).Get("kubeConfigSecret") != "dev-1-kubeconfig" {
		t.Fatal("values outside the rule were encrypted")
	}
	if strings.Contains(string(enc), "c2VjcmV0") || strings.Contains(string(enc), "clusters: []") {
		t.Fatal("a secret value is in the encrypted file")
	}
}

func TestDecrypt_RefusesWhatWasChanged(t *testing.T) {
	id := identity(t)
	for name, tc := range map[string]struct {
		r      Rules
		change func(f *File)
		want   error
	}{
		"a value swapped with another key's": {change: func(f *File) {
			sd := f.Docs[0].Get("stringData").(Branch)
			sd[0].Value, sd[1].Value = sd[1].Value, sd[0].Value
		}, want: ErrValue},
		"a clear value (mac over all)": {r: Rules{EncryptedRegex: "^stringData$"}, change: func(f *File) {
			f.Docs[0][0].Value = "v2"
		}, want: ErrMAC},
		"a value removed": {r: Rules{EncryptedRegex: "^stringData$"}, change: func(f *File) {
			f.Docs[0] = f.Docs[0][1:]
		}, want: ErrMAC},
		"lastmodified": {change: func(f *File) {
			f.Metadata.LastModified = time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		}, want: ErrMAC},
		"mac_only_encrypted turned on": {r: Rules{EncryptedRegex: "^stringData$"}, change: func(f *File) {
			f.Metadata.MACOnlyEncrypted = true
		}, want: ErrMAC},
		"a ciphertext written in clear": {change: func(f *File) {
			f.Docs[0].Get("stringData").(Branch)[0].Value = "plain text"
		}, want: ErrValue},
	} {
		t.Run(name, func(t *testing.T) {
			f, err := Load("s.yaml", mustEncrypt(t, "s.yaml", secret, tc.r, id.Recipient().String()))
			if err != nil {
				t.Fatal(err)
			}
			key, err := f.DataKey(id)
			if err != nil {
				t.Fatal(err)
			}
			tc.change(f)
			if err := f.Decrypt(key); !errors.Is(err, tc.want) {
				t.Fatalf("want %v, got %v", tc.want, err)
			}
		})
	}
	t.Run("mac_only_encrypted lets clear values change", func(t *testing.T) {
		f, err := Load("s.yaml", mustEncrypt(t, "s.yaml", secret, Rules{EncryptedRegex: "^stringData$", MACOnlyEncrypted: true}, id.Recipient().String()))
		if err != nil {
			t.Fatal(err)
		}
		key, err := f.DataKey(id)
		if err != nil {
			t.Fatal(err)
		}
		f.Docs[1][0].Value = "fleet.cattle.io/v1alpha2"
		if err := f.Decrypt(key); err != nil {
			t.Fatal(err)
		}
	})
}

func TestDataKey_OnlyTheRecipientsIdentities(t *testing.T) {
	a, b, other := identity(t), identity(t), identity(t)
	enc := mustEncrypt(t, "s.yaml", secret, Rules{}, a.Recipient().String(), b.Recipient().String())
	if _, err := open(t, "s.yaml", enc, other); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("another identity: want ErrNoIdentity, got %v", err)
	}
	if _, err := open(t, "s.yaml", enc); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("no identity: want ErrNoIdentity, got %v", err)
	}
	for _, id := range []age.Identity{a, b} {
		if _, err := open(t, "s.yaml", enc, other, id); err != nil {
			t.Fatalf("a recipient's identity: %v", err)
		}
	}
	f, err := Load("s.yaml", enc)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{a.Recipient().String(), b.Recipient().String()}, f.Metadata.Recipients()); d != "" {
		t.Fatal(d)
	}
}

func TestLoad_OtherKeyTypesAreNamedNotOpened(t *testing.T) {
	enc := []byte(`a: ENC[AES256_GCM,data:AA==,iv:AAAA,tag:AAAAAAAAAAAAAAAAAAAAAA==,type:str]
sops:
    kms:
        - arn: arn:aws:kms:eu-west-1:111122223333:key/abcd
          enc: Zm9v
    pgp:
        - fp: 85D77543B3D624B63CEA9E6DBC17301B491B3F21
          enc: x
    lastmodified: "2024-01-01T00:00:00Z"
    mac: ENC[AES256_GCM,data:AA==,iv:AAAA,tag:AAAAAAAAAAAAAAAAAAAAAA==,type:str]
    version: 3.8.1
`)
	f, err := Load("s.yaml", enc)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kms arn:aws:kms:eu-west-1:111122223333:key/abcd (not supported: only age)", "pgp 85D77543B3D624B63CEA9E6DBC17301B491B3F21 (not supported: only age)"}
	if d := cmp.Diff(want, f.Metadata.Recipients()); d != "" {
		t.Fatal(d)
	}
	if _, err := f.DataKey(identity(t)); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("want ErrNoIdentity, got %v", err)
	}
}

func TestLoad_Refusals(t *testing.T) {
	id := identity(t)
	enc := string(mustEncrypt(t, "s.yaml", "a: b\n", Rules{}, id.Recipient().String()))
	for name, tc := range map[string]struct{ in, want string }{
		"no metadata":         {"a: b\n", "no sops metadata"},
		"metadata not a map":  {"a: b\nsops: x\n", "not a mapping"},
		"no mac":              {"a: b\nsops: {age: []}\n", "no mac"},
		"a list document":     {"- a\n", "must be a mapping"},
		"a non-string key":    {"1: a\nsops: {mac: x}\n", "not a string"},
		"a duplicate key":     {"a: 1\na: 2\nsops: {mac: x}\n", "appears twice"},
		"two rules":           {strings.Replace(enc, "version:", "encrypted_regex: x\n    version:", 1), "one"},
		"comment rules":       {strings.Replace(enc, "version:", "encrypted_comment_regex: x\n    version:", 1), "comment"},
		"alias bomb":          {aliasBomb(), "too many values"},
		"age not a list":      {"a: b\nsops: {mac: x, age: 1}\n", "not a list"},
		"broken value syntax": {strings.Replace(enc, "ENC[AES256_GCM,data:", "ENC[AES256_GCM,dta:", 1), "cannot be decrypted"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := open(t, "s.yaml", []byte(tc.in), id)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			}
		})
	}
}

// aliasBomb expands to 10^9 values.
func aliasBomb() string {
	s := "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i < 9; i++ {
		s += strings.Replace("aN: &aN [*aP, *aP, *aP, *aP, *aP, *aP, *aP, *aP, *aP, *aP]\n", "N", string(rune('0'+i)), 2)
		s = strings.ReplaceAll(s, "aP", "a"+string(rune('0'+i-1)))
	}
	return s + "sops: {mac: x}\n"
}

func TestDecrypt_ErrorsNeverShowAValue(t *testing.T) {
	id := identity(t)
	f, err := Load("s.yaml", mustEncrypt(t, "s.yaml", secret, Rules{EncryptedRegex: "^stringData$"}, id.Recipient().String()))
	if err != nil {
		t.Fatal(err)
	}
	key, err := f.DataKey(id)
	if err != nil {
		t.Fatal(err)
	}
	f.Docs[0].Get("stringData").(Branch)[0].Value = "hunter2-in-clear"
	err = f.Decrypt(key)
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "stringData.value") {
		t.Fatalf("want an error naming the path only, got %v", err)
	}
}

func TestEmit_ClearDocumentsInTheirFormat(t *testing.T) {
	id := identity(t)
	f, err := open(t, "s.yaml", mustEncrypt(t, "s.yaml", secret, Rules{}, id.Recipient().String()), id)
	if err != nil {
		t.Fatal(err)
	}
	y, err := f.Emit(0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(y), "stringData:\n    value: |\n        apiVersion: v1\n") || strings.Contains(string(y), "sops") {
		t.Fatalf("unexpected YAML:\n%s", y)
	}
	back, err := loadYAML(y)
	if err != nil || len(back) != 1 || cmp.Diff(f.Docs[0], back[0]) != "" {
		t.Fatalf("the emitted YAML does not read back: %v %s", err, cmp.Diff(f.Docs[0], back[0]))
	}
	j := mustEncrypt(t, "s.json", `{"b": 1, "a": {"x": [1.5, "s", null]}}`, Rules{}, id.Recipient().String())
	jf, err := open(t, "s.json", j, id)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jf.Emit(0)
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n\t\"b\": 1,\n\t\"a\": {\n\t\t\"x\": [\n\t\t\t1.5,\n\t\t\t\"s\",\n\t\t\tnull\n\t\t]\n\t}\n}\n"; string(out) != want {
		t.Fatalf("JSON: got\n%s\nwant\n%s", out, want)
	}
}

// FuzzLoadAndDecrypt: a committed file is untrusted input. Whatever it
// holds, loading and decrypting return (no panic), and an error never
// shows the identity.
func FuzzLoadAndDecrypt(f *testing.F) {
	id := identity(f)
	f.Add([]byte(mustEncrypt(f, "s.yaml", secret, Rules{EncryptedRegex: "^(data|stringData)$"}, id.Recipient().String())), false)
	f.Add([]byte(mustEncrypt(f, "s.json", `{"a": {"b": [1, 2.5, true, "x"]}}`, Rules{}, id.Recipient().String())), true)
	f.Add([]byte("a: *x\nsops: {mac: x}\n"), false)
	f.Add([]byte(aliasBomb()), false)
	f.Fuzz(func(t *testing.T, data []byte, json bool) {
		path := "f.yaml"
		if json {
			path = "f.json"
		}
		_, err := open(t, path, data, id)
		if err != nil && strings.Contains(err.Error(), id.String()) {
			t.Fatalf("the error shows the identity: %v", err)
		}
	})
}
