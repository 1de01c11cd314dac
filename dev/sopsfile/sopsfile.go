// Package sopsfile encrypts files as `sops --encrypt` writes them, with
// sops' own library, for age recipients: the dev harness publishes
// examples/gitops with its kubeconfigs encrypted as a user would, and the
// tests' fixtures (gitops/decrypt/sopstest) are made with it.
package sopsfile

import (
	"errors"
	"path/filepath"
	"strings"
	"time"

	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keys"
	sopsjson "github.com/getsops/sops/v3/stores/json"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
	"github.com/getsops/sops/v3/version"
)

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
func Encrypt(path string, plain []byte, r Rules, recipients ...string) ([]byte, error) {
	var group []keys.MasterKey
	for _, rc := range recipients {
		mk, err := sopsage.MasterKeyFromRecipient(rc)
		if err != nil {
			return nil, err
		}
		group = append(group, mk)
	}
	return EncryptWith(path, plain, r, group, nil)
}

// EncryptWith encrypts with the given master keys. With dataKey nil it
// generates a data key and encrypts it for the keys (age needs no
// credentials); else the keys' encrypted data keys are left as they are
// (a file naming a key that cannot be called here, a KMS key).
func EncryptWith(path string, plain []byte, r Rules, group []keys.MasterKey, dataKey []byte) ([]byte, error) {
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
