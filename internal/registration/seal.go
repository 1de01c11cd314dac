package registration

import (
	"crypto/ecdh"
	"crypto/hpke"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// The credential is handed back sealed (HPKE, RFC 9180: DHKEM(X25519,
// HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305) to a key pair the agent
// makes for one registration and keeps only in memory, in the status of
// that registration (status.credential): useless to anyone who reads it
// but that agent, so it needs no Secret, no access of its own and no
// removal (docs/architecture.md "The handshake").

// SealedCredential is what the sealed box holds: the keys of an unsealed
// credential Secret, the same values.
type SealedCredential struct {
	Token               string `json:"token"`
	ClusterNamespace    string `json:"clusterNamespace"`
	ClusterName         string `json:"clusterName"`
	DeploymentNamespace string `json:"deploymentNamespace"`
	ServiceAccount      string `json:"serviceAccountName"`
	Expires             string `json:"expires"`
}

// SecretData is the credential as the data of a credential Secret in the
// clear (an older agent's).
func (c SealedCredential) SecretData() map[string][]byte {
	return map[string][]byte{
		KeyToken:               []byte(c.Token),
		KeyClusterNamespace:    []byte(c.ClusterNamespace),
		KeyClusterName:         []byte(c.ClusterName),
		KeyDeploymentNamespace: []byte(c.DeploymentNamespace),
		KeyServiceAccount:      []byte(c.ServiceAccount),
		KeyExpires:             []byte(c.Expires),
	}
}

// CredentialFromSecretData reads a credential Secret in the clear.
func CredentialFromSecretData(d map[string][]byte) *SealedCredential {
	return &SealedCredential{
		Token:               string(d[KeyToken]),
		ClusterNamespace:    string(d[KeyClusterNamespace]),
		ClusterName:         string(d[KeyClusterName]),
		DeploymentNamespace: string(d[KeyDeploymentNamespace]),
		ServiceAccount:      string(d[KeyServiceAccount]),
		Expires:             string(d[KeyExpires]),
	}
}

func suite() (hpke.KEM, hpke.KDF, hpke.AEAD) {
	return hpke.DHKEM(ecdh.X25519()), hpke.HKDFSHA256(), hpke.ChaCha20Poly1305()
}

// sealInfo binds a sealed credential to the one registration it answers:
// opened with another registration's namespace, name or UID it fails.
func sealInfo(namespace, name, uid string) []byte {
	return []byte("fleet.cattle.io/v1alpha1 ClusterRegistration credential " + namespace + "/" + name + " " + uid)
}

// CredentialKey is an agent's key pair for one registration.
type CredentialKey struct{ priv hpke.PrivateKey }

// NewCredentialKey makes a key pair.
func NewCredentialKey() (*CredentialKey, error) {
	kem, _, _ := suite()
	priv, err := kem.GenerateKey()
	if err != nil {
		return nil, err
	}
	return &CredentialKey{priv: priv}, nil
}

// PublicKey is the value of the registration's spec.credentialPublicKey.
func (k *CredentialKey) PublicKey() string {
	return base64.StdEncoding.EncodeToString(k.priv.PublicKey().Bytes())
}

// Open unseals the credential handed back for the registration
// namespace/name with this UID.
func (k *CredentialKey) Open(sealed []byte, namespace, name, uid string) (*SealedCredential, error) {
	_, kdf, aead := suite()
	plain, err := hpke.Open(k.priv, kdf, aead, sealInfo(namespace, name, uid), sealed)
	if err != nil {
		return nil, fmt.Errorf("the sealed credential does not open with this registration's key: %w", err)
	}
	c := &SealedCredential{}
	if err := json.Unmarshal(plain, c); err != nil {
		return nil, fmt.Errorf("the sealed credential is not valid JSON: %w", err)
	}
	if c.Token == "" || c.ClusterName == "" || c.DeploymentNamespace == "" {
		return nil, errors.New("the sealed credential is incomplete")
	}
	return c, nil
}

// ParseCredentialPublicKey checks a spec.credentialPublicKey.
func ParseCredentialPublicKey(s string) (hpke.PublicKey, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("spec.credentialPublicKey is not base64: %w", err)
	}
	kem, _, _ := suite()
	pub, err := kem.NewPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("spec.credentialPublicKey is not an X25519 public key: %w", err)
	}
	return pub, nil
}

// Seal seals c to the public key of the registration namespace/name/uid.
func Seal(pub hpke.PublicKey, c SealedCredential, namespace, name, uid string) ([]byte, error) {
	plain, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	_, kdf, aead := suite()
	return hpke.Seal(pub, kdf, aead, sealInfo(namespace, name, uid), plain)
}
