package decrypt

import (
	"testing"

	"filippo.io/age"

	"github.com/gitops-fleet/fleet/gitops/decrypt/sopstest"
)

func newIdentity(t *testing.T) *age.X25519Identity { return sopstest.NewIdentity(t) }

// keysOf is what the reconciler builds from a decryption Secret holding ids.
func keysOf(t *testing.T, ids ...*age.X25519Identity) *Keys {
	t.Helper()
	var s string
	for _, id := range ids {
		s += "# public key: " + id.Recipient().String() + "\n" + id.String() + "\n"
	}
	k, err := KeysFromSecretData(map[string][]byte{"identity.agekey": []byte(s)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type rules = sopstest.Rules

var sopsDefault = sopstest.Default

func encryptFor(t *testing.T, path string, plain []byte, r rules, recipients ...string) []byte {
	t.Helper()
	return sopstest.Encrypt(t, path, plain, r, recipients...)
}
