package decrypt

import (
	"crypto/rand"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keys"
	sopsjson "github.com/getsops/sops/v3/stores/json"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
	"github.com/getsops/sops/v3/version"
)

// Fixtures are encrypted in the tests with sops' own library, as
// `sops --encrypt` does, for an age recipient generated in the test: no
// private key is committed.

// newIdentity is a fresh age key pair.
func newIdentity(t *testing.T) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

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

type fileStore interface {
	LoadPlainFile([]byte) (sops.TreeBranches, error)
	EmitEncryptedFile(sops.Tree) ([]byte, error)
}

func plainStoreFor(path string) fileStore {
	if isJSON(path) {
		return sopsjson.NewStore(&config.JSONStoreConfig{})
	}
	return sopsyaml.NewStore(&config.YAMLStoreConfig{})
}

// rules are the .sops.yaml creation-rule fields a test encrypts with.
type rules struct {
	EncryptedRegex    string
	UnencryptedSuffix string
	MACOnlyEncrypted  bool
}

// sopsDefault is what `sops --encrypt` uses without a creation rule.
var sopsDefault = rules{UnencryptedSuffix: "_unencrypted"}

// encryptFor encrypts a plain YAML or JSON file for age recipients, as
// `sops --encrypt` writes it.
func encryptFor(t *testing.T, path string, plain []byte, r rules, recipients ...string) []byte {
	t.Helper()
	var group sops.KeyGroup
	for _, rc := range recipients {
		mk, err := sopsage.MasterKeyFromRecipient(rc)
		if err != nil {
			t.Fatal(err)
		}
		group = append(group, mk)
	}
	return encryptWith(t, path, plain, r, group, nil)
}

// encryptWith encrypts with the given keys; dataKey nil generates one and
// encrypts it for the keys (age only), else the keys' encrypted data keys
// are left as they are.
func encryptWith(t *testing.T, path string, plain []byte, r rules, group []keys.MasterKey, dataKey []byte) []byte {
	t.Helper()
	st := plainStoreFor(path)
	branches, err := st.LoadPlainFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	tree := sops.Tree{Branches: branches, Metadata: sops.Metadata{
		KeyGroups:         []sops.KeyGroup{group},
		EncryptedRegex:    r.EncryptedRegex,
		UnencryptedSuffix: r.UnencryptedSuffix,
		MACOnlyEncrypted:  r.MACOnlyEncrypted,
		Version:           version.Version,
	}}
	if dataKey == nil {
		var errs []error
		dataKey, errs = tree.GenerateDataKey()
		if len(errs) > 0 {
			t.Fatal(errs)
		}
	}
	cipher := aes.NewCipher()
	mac, err := tree.Encrypt(dataKey, cipher)
	if err != nil {
		t.Fatal(err)
	}
	tree.Metadata.LastModified = time.Now().UTC()
	tree.Metadata.MessageAuthenticationCode, err = cipher.Encrypt(mac, dataKey, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil {
		t.Fatal(err)
	}
	out, err := st.EmitEncryptedFile(tree)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func randomKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}
