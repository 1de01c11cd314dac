// Package sopsfile encrypts files as `sops --encrypt` writes them, for age
// recipients, with gitops/sops (tested against sops itself in
// dev/sopscompat): the dev harness publishes examples/gitops with its
// kubeconfigs encrypted as a user would, and the tests' fixtures
// (gitops/decrypt/sopstest) are made with it.
package sopsfile

import "github.com/gitops-fleet/fleet/gitops/sops"

// Rules are the .sops.yaml creation-rule fields a file is encrypted with.
type Rules = sops.Rules

// Default is what `sops --encrypt` uses without a creation rule.
var Default = Rules{UnencryptedSuffix: sops.DefaultUnencryptedSuffix}

// ValuesOfSecrets encrypts only Secrets' values (the README's rule).
var ValuesOfSecrets = Rules{EncryptedRegex: "^(data|stringData)$"}

// ValuesOfSecretsMACOnly is ValuesOfSecrets with mac_only_encrypted: the
// clear fields (the Cluster beside its kubeconfig Secret) stay editable
// without sops, as examples/gitops' .sops.yaml has it.
var ValuesOfSecretsMACOnly = Rules{EncryptedRegex: "^(data|stringData)$", MACOnlyEncrypted: true}

// Encrypt encrypts a plain YAML (or, by its extension, JSON) file for age
// recipients, as `sops --encrypt` writes it (comments are not kept).
func Encrypt(path string, plain []byte, r Rules, recipients ...string) ([]byte, error) {
	return sops.Encrypt(path, plain, r, recipients...)
}
