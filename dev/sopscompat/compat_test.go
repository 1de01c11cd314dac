// Package sopscompat checks that gitops/sops and sops' own library agree on
// the SOPS format, both ways: files sops encrypts are decrypted by
// gitops/sops to the same values, and files gitops/sops encrypts are
// decrypted by sops (data key, values and MAC). `make sops-compat` runs it
// in CI.
package sopscompat

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	sopslib "github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keys"
	sopsjson "github.com/getsops/sops/v3/stores/json"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
	"github.com/google/go-cmp/cmp"

	"github.com/gitops-fleet/fleet/gitops/sops"
)

// yamlFile has what sops' YAML store reads: several documents, comments in
// every place (sops encrypts them; gitops/sops does not read them),
// anchors, and every scalar type.
const yamlFile = `# head comment of the document
apiVersion: v1
kind: Secret
metadata:
    name: dev-1-kubeconfig # line comment
    labels: &labels
        team: a
        tier: "1"
stringData:
    # a comment before a value
    value: |
        apiVersion: v1
        clusters: []
    empty: ""
    unicode: "grüße, 世界"
data:
    token: c2VjcmV0
list:
    # a comment in a list
    - a
    - 1 # after an item
    - -2.5
    - true
    - null
    - {k: v, n: [1, 2]}
    - 2015-01-01T10:00:00Z
copy: *labels
big: 9007199254740993
float: 1.0e+3
octal: 0o17
# a foot comment
---
apiVersion: fleet.cattle.io/v1alpha1
kind: Cluster
metadata:
    name: dev-1
spec:
    kubeConfigSecret: dev-1-kubeconfig
    paused: false
    redeployAgentGeneration: 2
    when: 2015-01-01
    nothing: null
    name_unencrypted: clear
    secretData: x
`

const jsonFile = `{
	"apiVersion": "v1",
	"kind": "Secret",
	"metadata": {"name": "s", "labels": {"a": "1"}},
	"stringData": {"value": "line\nline", "empty": "", "unicode": "grüße"},
	"numbers": [1, -2, 2.5, 1e3, 9007199254740993, 1.7976931348623157e308],
	"flags": [true, false, null],
	"nested": {"list": [{"k": "v"}, [1, [2]]]},
	"name_unencrypted": "clear"
}
`

var rules = map[string]sops.Rules{
	"default":            {},
	"encrypted_regex":    {EncryptedRegex: "^(data|stringData)$"},
	"mac_only_encrypted": {EncryptedRegex: "^(data|stringData)$", MACOnlyEncrypted: true},
	"unencrypted_regex":  {UnencryptedRegex: "^(apiVersion|kind|metadata)$"},
	"encrypted_suffix":   {EncryptedSuffix: "Data"},
	"unencrypted_suffix": {UnencryptedSuffix: "_unencrypted"},
}

var files = map[string]string{"f.yaml": yamlFile, "f.json": jsonFile}

type store interface {
	sopslib.EncryptedFileLoader
	sopslib.PlainFileLoader
	sopslib.EncryptedFileEmitter
}

func storeFor(path string) store {
	if strings.HasSuffix(path, ".json") {
		return sopsjson.NewStore(&config.JSONStoreConfig{})
	}
	return sopsyaml.NewStore(&config.YAMLStoreConfig{})
}

// clear is the file as sops reads it in clear, in gitops/sops' form.
func clear(t *testing.T, path, plain string) []sops.Branch {
	t.Helper()
	branches, err := storeFor(path).LoadPlainFile([]byte(plain))
	if err != nil {
		t.Fatal(err)
	}
	return fromSOPS(branches)
}

func fromSOPS(branches sopslib.TreeBranches) []sops.Branch {
	out := []sops.Branch{}
	for _, b := range branches {
		out = append(out, fromValue(b).(sops.Branch))
	}
	return out
}

func fromValue(v any) any {
	switch v := v.(type) {
	case sopslib.TreeBranch:
		b := sops.Branch{}
		for _, it := range v {
			if _, ok := it.Key.(sopslib.Comment); ok {
				continue
			}
			b = append(b, sops.Item{Key: it.Key.(string), Value: fromValue(it.Value)})
		}
		return b
	case []any:
		l := []any{}
		for _, e := range v {
			if _, ok := e.(sopslib.Comment); ok {
				continue
			}
			l = append(l, fromValue(e))
		}
		return l
	case []byte:
		return string(v)
	}
	return v
}

// integralFloats: a float with an integral value is written as an integer
// in clear (as sops writes it too) and reads back as one.
var integralFloats = cmp.FilterValues(func(a, b any) bool {
	_, af := a.(float64)
	_, bf := b.(float64)
	return af || bf
}, cmp.Comparer(func(a, b any) bool { return number(a) == number(b) }))

func number(v any) any {
	switch v := v.(type) {
	case int:
		return float64(v)
	case float64:
		return v
	}
	return v
}

func identities(t *testing.T, n int) ([]*age.X25519Identity, []string) {
	var ids []*age.X25519Identity
	var rs []string
	for range n {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		rs = append(rs, id.Recipient().String())
	}
	return ids, rs
}

// sopsEncrypt encrypts as `sops --encrypt` does, with key groups of age
// recipients (more than one group: the data key is split, Shamir).
func sopsEncrypt(t *testing.T, path, plain string, r sops.Rules, groups [][]string, threshold int) []byte {
	t.Helper()
	st := storeFor(path)
	branches, err := st.LoadPlainFile([]byte(plain))
	if err != nil {
		t.Fatal(err)
	}
	var kgs []sopslib.KeyGroup
	for _, g := range groups {
		var kg sopslib.KeyGroup
		for _, rc := range g {
			mk, err := sopsage.MasterKeyFromRecipient(rc)
			if err != nil {
				t.Fatal(err)
			}
			kg = append(kg, keys.MasterKey(mk))
		}
		kgs = append(kgs, kg)
	}
	tree := sopslib.Tree{Branches: branches, Metadata: sopslib.Metadata{
		KeyGroups: kgs, ShamirThreshold: threshold,
		UnencryptedSuffix: r.UnencryptedSuffix, EncryptedSuffix: r.EncryptedSuffix,
		UnencryptedRegex: r.UnencryptedRegex, EncryptedRegex: r.EncryptedRegex,
		MACOnlyEncrypted: r.MACOnlyEncrypted, Version: sops.FormatVersion,
	}}
	if r == (sops.Rules{}) {
		tree.Metadata.UnencryptedSuffix = sopslib.DefaultUnencryptedSuffix
	}
	dataKey, errs := tree.GenerateDataKey()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	cipher := aes.NewCipher()
	mac, err := tree.Encrypt(dataKey, cipher)
	if err != nil {
		t.Fatal(err)
	}
	tree.Metadata.LastModified = time.Now().UTC()
	if tree.Metadata.MessageAuthenticationCode, err = cipher.Encrypt(mac, dataKey, tree.Metadata.LastModified.Format(time.RFC3339)); err != nil {
		t.Fatal(err)
	}
	out, err := st.EmitEncryptedFile(tree)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sopsDecrypt decrypts as sops does (age keys only), checking the MAC.
func sopsDecrypt(t *testing.T, path string, enc []byte, ids []*age.X25519Identity) []sops.Branch {
	t.Helper()
	tree, err := storeFor(path).LoadEncryptedFile(enc)
	if err != nil {
		t.Fatalf("sops cannot load the file: %v\n%s", err, enc)
	}
	var parsed sopsage.ParsedIdentities
	for _, id := range ids {
		parsed = append(parsed, id)
	}
	var dataKey []byte
	for _, k := range tree.Metadata.KeyGroups[0] {
		mk := k.(*sopsage.MasterKey)
		parsed.ApplyToMasterKey(mk)
		if dataKey, err = mk.Decrypt(); err == nil {
			break
		}
	}
	if dataKey == nil {
		t.Fatalf("sops cannot open the data key: %v", err)
	}
	cipher := aes.NewCipher()
	mac, err := tree.Decrypt(dataKey, cipher)
	if err != nil {
		t.Fatalf("sops cannot decrypt the values: %v", err)
	}
	stored, err := cipher.Decrypt(tree.Metadata.MessageAuthenticationCode, dataKey, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil || stored != mac {
		t.Fatalf("sops: the MAC does not match (%v)", err)
	}
	return fromSOPS(tree.Branches)
}

func ours(t *testing.T, path string, enc []byte, ids []*age.X25519Identity) *sops.File {
	t.Helper()
	f, err := sops.Load(path, enc)
	if err != nil {
		t.Fatalf("gitops/sops cannot load the file: %v\n%s", err, enc)
	}
	var is []age.Identity
	for _, id := range ids {
		is = append(is, id)
	}
	key, err := f.DataKey(is...)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Decrypt(key); err != nil {
		t.Fatal(err)
	}
	return f
}

// Both read a file sops encrypted to the same values. (Not always the
// values of the clear file: sops writes 1e3 in clear as 1000, for one.)
func TestFilesSOPSWritesAreReadAlike(t *testing.T) {
	for path, plain := range files {
		for name, r := range rules {
			t.Run(path+"/"+name, func(t *testing.T) {
				ids, rs := identities(t, 2)
				enc := sopsEncrypt(t, path, plain, r, [][]string{rs}, 0)
				want := sopsDecrypt(t, path, enc, ids[:1])
				f := ours(t, path, enc, ids[1:])
				if d := cmp.Diff(want, f.Docs); d != "" {
					t.Fatalf("gitops/sops decrypts otherwise (-sops +gitops/sops):\n%s", d)
				}
				// The clear documents gitops/sops writes read back in sops
				// as the same values.
				for i := range f.Docs {
					out, err := f.Emit(i)
					if err != nil {
						t.Fatal(err)
					}
					if d := cmp.Diff(want[i:i+1], clear(t, path, string(out)), integralFloats); d != "" {
						t.Fatalf("document %d as gitops/sops writes it in clear reads otherwise in sops (-decrypted +read back):\n%s\n%s", i, d, out)
					}
				}
			})
		}
	}
}

func TestFilesGitopsSOPSWritesAreReadAlike(t *testing.T) {
	for path, plain := range files {
		for name, r := range rules {
			t.Run(path+"/"+name, func(t *testing.T) {
				ids, rs := identities(t, 2)
				enc, err := sops.Encrypt(path, []byte(plain), r, rs...)
				if err != nil {
					t.Fatal(err)
				}
				want := ours(t, path, enc, ids[1:]).Docs
				if d := cmp.Diff(want, sopsDecrypt(t, path, enc, ids[:1])); d != "" {
					t.Fatalf("sops decrypts otherwise (-gitops/sops +sops):\n%s", d)
				}
			})
		}
	}
}

func TestShamirKeyGroups(t *testing.T) {
	ids, rs := identities(t, 3)
	groups := [][]string{{rs[0]}, {rs[1]}, {rs[2]}}
	enc := sopsEncrypt(t, "f.yaml", yamlFile, sops.Rules{}, groups, 2)
	f := ours(t, "f.yaml", enc, ids[1:])
	tree, err := storeFor("f.yaml").LoadEncryptedFile(enc)
	if err != nil {
		t.Fatal(err)
	}
	// As the sops CLI opens it: identities from SOPS_AGE_KEY.
	t.Setenv("SOPS_AGE_KEY", ids[1].String()+"\n"+ids[2].String())
	key, err := tree.Metadata.GetDataKey()
	if err != nil {
		t.Fatalf("sops cannot open the data key with two of three groups: %v", err)
	}
	if _, err := tree.Decrypt(key, aes.NewCipher()); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(fromSOPS(tree.Branches), f.Docs); d != "" {
		t.Fatal(d)
	}
	one, err := sops.Load("f.yaml", enc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := one.DataKey(ids[0]); err == nil {
		t.Fatal("one share of three, with a threshold of two, opened the data key")
	}
}

// A value moved to another key does not decrypt in either.
func TestMovedValuesAreRefusedByBoth(t *testing.T) {
	ids, rs := identities(t, 1)
	enc := string(sopsEncrypt(t, "f.yaml", "a: x\nb: y\n", sops.Rules{}, [][]string{rs}, 0))
	lines := strings.Split(enc, "\n")
	lines[0], lines[1] = "a:"+strings.TrimPrefix(lines[1], "b:"), "b:"+strings.TrimPrefix(lines[0], "a:")
	moved := []byte(strings.Join(lines, "\n"))
	f, err := sops.Load("f.yaml", moved)
	if err != nil {
		t.Fatal(err)
	}
	key, err := f.DataKey(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Decrypt(key); err == nil {
		t.Fatal("gitops/sops decrypted a moved value")
	}
	tree, err := storeFor("f.yaml").LoadEncryptedFile(moved)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Decrypt(key, aes.NewCipher()); err == nil {
		t.Fatal("sops decrypted a moved value: the test's premise is wrong")
	}
}

func Example() {
	fmt.Println(sops.FormatVersion)
	// Output: 3.13.3
}
