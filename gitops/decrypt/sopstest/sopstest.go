// Package sopstest encrypts test fixtures as `sops --encrypt` writes them
// (gitops/sops, kept equal to sops by dev/sopscompat), for age recipients
// generated in the test: no private key is ever committed.
package sopstest

import (
	"testing"

	"filippo.io/age"

	"github.com/gitops-fleet/fleet/gitops/sops"
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
type Rules = sops.Rules

var (
	// Default is what `sops --encrypt` uses without a creation rule.
	Default = Rules{UnencryptedSuffix: sops.DefaultUnencryptedSuffix}
	// ValuesOfSecrets encrypts only Secrets' values (the README's rule).
	ValuesOfSecrets = Rules{EncryptedRegex: "^(data|stringData)$"}
	// ValuesOfSecretsMACOnly is ValuesOfSecrets with mac_only_encrypted.
	ValuesOfSecretsMACOnly = Rules{EncryptedRegex: "^(data|stringData)$", MACOnlyEncrypted: true}
)

// Encrypt encrypts a plain YAML (or, by its extension, JSON) file for age
// recipients, as `sops --encrypt` writes it.
func Encrypt(t testing.TB, path string, plain []byte, r Rules, recipients ...string) []byte {
	t.Helper()
	out, err := sops.Encrypt(path, plain, r, recipients...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
