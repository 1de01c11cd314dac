package decrypt

import (
	"strings"
	"testing"

	"github.com/gitops-fleet/fleet/gitops/decrypt/sopstest"
)

// FuzzDecrypt: a committed file is untrusted input. Whatever it holds,
// Decrypt returns (no panic), and an error never shows the key.
func FuzzDecrypt(f *testing.F) {
	id := sopstest.NewIdentity(f)
	keys, err := KeysFromSecretData(map[string][]byte{"k.agekey": []byte(id.String())})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sopstest.Encrypt(f, "s.yaml", kubeconfigFile(), sopstest.ValuesOfSecrets, id.Recipient().String()))
	f.Add(sopstest.Encrypt(f, "s.yaml", []byte("apiVersion: v1\nkind: ConfigMap\ndata:\n  a: b\n"), sopstest.Default, id.Recipient().String()))
	f.Add([]byte("sops:\n  mac: x\n  age: [{recipient: x, enc: y}]\n"))
	f.Add([]byte("a: 1\n---\nsops: {mac: 1, lastmodified: 2}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Decrypt([]File{{Path: "f.yaml", Data: data}}, keys)
		if err != nil && strings.Contains(err.Error(), id.String()) {
			t.Fatalf("the error shows the key: %v", err)
		}
	})
}

// FuzzKeysFromSecretData: no key-like line of the key Secret appears in an
// error, whatever it holds.
func FuzzKeysFromSecretData(f *testing.F) {
	f.Add([]byte(sopstest.NewIdentity(f).String()))
	f.Add([]byte("# comment\nAGE-PLUGIN-X-1ABC\n"))
	f.Add([]byte("AGE-SECRET-KEY-1QQQQ\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := KeysFromSecretData(map[string][]byte{"k.agekey": data})
		if err == nil {
			return
		}
		for _, line := range strings.Split(string(data), "\n") {
			if l := strings.TrimSpace(line); strings.HasPrefix(l, "AGE-") && len(l) >= 12 && strings.Contains(err.Error(), l) {
				t.Fatalf("the error shows the line %q: %v", l, err)
			}
		}
	})
}
