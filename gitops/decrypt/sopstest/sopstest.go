// Package sopstest encrypts test fixtures as `sops --encrypt` writes them,
// with sops' own library, for age recipients generated in the test: no
// private key is ever committed.
package sopstest

import (
	"crypto/rand"
	"errors"
	"path/filepath"
	"strings"
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

// NewIdentity is a fresh age key pair.
func NewIdentity(t testing.TB) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Rules are the .sops.yaml creation-rule fields a file is encrypted with.
type Rules struct {
	EncryptedRegex    string
	UnencryptedSuffix string
	MACOnlyEncrypted  bool
}

// Default is what `sops --encrypt` uses without a creation rule.
var Default = Rules{UnencryptedSuffix: "_unencrypted"}

// ValuesOfSecrets encrypts only Secrets' values (the README's rule).
var ValuesOfSecrets = Rules{EncryptedRegex: "^(data|stringData)$"}

// ValuesOfSecretsMACOnly is ValuesOfSecrets with mac_only_encrypted: the
// clear fields (the Cluster beside its kubeconfig Secret) stay editable
// without sops, as examples/gitops' .sops.yaml has it.
var ValuesOfSecretsMACOnly = Rules{EncryptedRegex: "^(data|stringData)$", MACOnlyEncrypted: true}

type fileStore interface {
	LoadPlainFile([]byte) (sops.TreeBranches, error)
	EmitEncryptedFile(sops.Tree) ([]byte, error)
}

func storeFor(path string) fileStore {
	if strings.EqualFold(filepath.Ext(path), ".json") {
		return sopsjson.NewStore(&config.JSONStoreConfig{})
	}
	return sopsyaml.NewStore(&config.YAMLStoreConfig{})
}

// Encrypt encrypts a plain YAML (or, by its extension, JSON) file for age
// recipients, as `sops --encrypt` writes it.
func Encrypt(t testing.TB, path string, plain []byte, r Rules, recipients ...string) []byte {
	t.Helper()
	out, err := EncryptFile(path, plain, r, recipients...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// EncryptFile is Encrypt for callers that are not tests (the dev
// harness publishing examples/gitops as a user would).
func EncryptFile(path string, plain []byte, r Rules, recipients ...string) ([]byte, error) {
	var group []keys.MasterKey
	for _, rc := range recipients {
		mk, err := sopsage.MasterKeyFromRecipient(rc)
		if err != nil {
			return nil, err
		}
		group = append(group, mk)
	}
	return encrypt(path, plain, r, group, nil)
}

// EncryptWith encrypts with the given master keys. With dataKey nil it
// generates a data key and encrypts it for the keys (age needs no
// credentials); else the keys' encrypted data keys are left as they are
// (a file naming a key that cannot be called here, a KMS key).
func EncryptWith(t testing.TB, path string, plain []byte, r Rules, group []keys.MasterKey, dataKey []byte) []byte {
	t.Helper()
	out, err := encrypt(path, plain, r, group, dataKey)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func encrypt(path string, plain []byte, r Rules, group []keys.MasterKey, dataKey []byte) ([]byte, error) {
	st := storeFor(path)
	branches, err := st.LoadPlainFile(plain)
	if err != nil {
		return nil, err
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
			return nil, errors.Join(errs...)
		}
	}
	cipher := aes.NewCipher()
	mac, err := tree.Encrypt(dataKey, cipher)
	if err != nil {
		return nil, err
	}
	tree.Metadata.LastModified = time.Now().UTC()
	tree.Metadata.MessageAuthenticationCode, err = cipher.Encrypt(mac, dataKey, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil {
		return nil, err
	}
	return st.EmitEncryptedFile(tree)
}

// RandomDataKey is a data key for EncryptWith.
func RandomDataKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}
