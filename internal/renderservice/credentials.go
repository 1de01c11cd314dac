package renderservice

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// SecretName is the Secret (in the controller's namespace) holding the
// Credentials: the controller makes and renews it; the renderer mounts
// KeyCert, KeyKey and KeyTokenHash of it as files.
const SecretName = "fleet-renderer-tls"

// The keys of the Secret, which are also the file names in the renderer's
// credentials directory.
const (
	// KeyCA is the PEM bundle the controller verifies the renderer with.
	KeyCA = "ca.crt"
	// KeyCert and KeyKey are the renderer's serving certificate (then its
	// CA) and key.
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
	// KeyToken is the bearer token the controller sends.
	KeyToken = "token"
	// KeyTokenHash is the hex SHA-256 of the token: all the renderer holds
	// of it.
	KeyTokenHash = "token.sha256"
)

const (
	// certificateLifetime is how long a renderer certificate is valid.
	certificateLifetime = 365 * 24 * time.Hour
	// RenewBefore: a certificate with less than this left is renewed.
	RenewBefore = 90 * 24 * time.Hour
)

// Credentials are what the controller and the renderer authenticate each
// other with: a serving certificate from a CA whose key is discarded once
// it signed it (so nobody can issue another), and a bearer token.
type Credentials struct {
	// CA is the PEM bundle the controller trusts: the current certificate's
	// CA and, after a renewal, the previous one while it is valid (the
	// renderer serves the previous certificate until it reads the new
	// files).
	CA []byte
	// Cert (the certificate, then its CA) and Key are the renderer's.
	Cert, Key []byte
	// Token is the bearer token the controller sends.
	Token string
}

// NewCredentials makes credentials for a renderer reached at host (a DNS
// name or an IP address).
func NewCredentials(host string) (*Credentials, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	c := &Credentials{Token: base64.RawURLEncoding.EncodeToString(raw)}
	if err := c.RenewCertificate(host, time.Now()); err != nil {
		return nil, err
	}
	return c, nil
}

// RenewCertificate gives the renderer a new certificate for host, from a new
// CA, and keeps trusting the CAs of CA still valid at now. The token stays.
func (c *Credentials) RenewCertificate(host string, now time.Time) error {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKeyWithOptions(certutil.SelfSignedCertKeyOptions{Host: host, MaxAge: certificateLifetime})
	if err != nil {
		return fmt.Errorf("making the renderer's certificate: %w", err)
	}
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || len(certs) != 2 {
		return fmt.Errorf("making the renderer's certificate: want a certificate and its CA (%v)", err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: certs[1].Raw})
	if old, err := certutil.ParseCertsPEM(c.CA); err == nil {
		for _, o := range old {
			if o.NotAfter.After(now) {
				ca = append(ca, pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: o.Raw})...)
			}
		}
	}
	c.CA, c.Cert, c.Key = ca, certPEM, keyPEM
	return nil
}

// Renewal says why the certificate must be renewed to serve host at now:
// it does not cover host, it is not signed by a CA the controller trusts,
// or it expires within RenewBefore. Empty: it need not be.
func (c *Credentials) Renewal(host string, now time.Time) string {
	pair, err := tls.X509KeyPair(c.Cert, c.Key)
	if err != nil {
		return fmt.Sprintf("the certificate and key do not form a pair: %v", err)
	}
	leaf := pair.Leaf
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c.CA) {
		return "no CA certificate"
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Sprintf("the certificate does not verify: %v", err)
	}
	if err := leaf.VerifyHostname(host); err != nil {
		return fmt.Sprintf("the certificate is not for %s", host)
	}
	if leaf.NotAfter.Sub(now) < RenewBefore {
		return fmt.Sprintf("the certificate expires at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// SecretData is the credentials as the data of Secret SecretName.
func (c *Credentials) SecretData() map[string][]byte {
	return map[string][]byte{
		KeyCA: c.CA, KeyCert: c.Cert, KeyKey: c.Key,
		KeyToken: []byte(c.Token), KeyTokenHash: []byte(TokenHash(c.Token)),
	}
}

// CredentialsFromSecretData reads credentials from the data of Secret
// SecretName.
func CredentialsFromSecretData(data map[string][]byte) (*Credentials, error) {
	for _, k := range []string{KeyCA, KeyCert, KeyKey, KeyToken, KeyTokenHash} {
		if len(data[k]) == 0 {
			return nil, fmt.Errorf("key %s is missing", k)
		}
	}
	c := &Credentials{CA: data[KeyCA], Cert: data[KeyCert], Key: data[KeyKey], Token: string(data[KeyToken])}
	if TokenHash(c.Token) != string(bytes.TrimSpace(data[KeyTokenHash])) {
		return nil, fmt.Errorf("key %s is not the hash of key %s", KeyTokenHash, KeyToken)
	}
	if _, err := tls.X509KeyPair(c.Cert, c.Key); err != nil {
		return nil, fmt.Errorf("keys %s and %s: %w", KeyCert, KeyKey, err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(c.CA) {
		return nil, fmt.Errorf("key %s holds no PEM certificate", KeyCA)
	}
	return c, nil
}

// TokenHash is the hex SHA-256 of a bearer token.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// WriteServerFiles writes into dir the files the chart mounts into the
// renderer's pod (KeyCert, KeyKey, KeyTokenHash), as the kubelet does: for
// renderers run outside a cluster (tests, the bench).
func WriteServerFiles(dir string, c *Credentials) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	data := c.SecretData()
	for _, k := range []string{KeyCert, KeyKey, KeyTokenHash} {
		if err := os.WriteFile(filepath.Join(dir, k), data[k], 0o600); err != nil {
			return err
		}
	}
	return nil
}

// serverCredentials are what the renderer reads from its directory.
type serverCredentials struct {
	cert      *tls.Certificate
	tokenHash []byte // raw SHA-256
}

func readServerCredentials(dir string) (*serverCredentials, error) {
	read := func(k string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, k))
		if err != nil {
			return nil, fmt.Errorf("reading the renderer's credentials (Secret %s, mounted at %s): %w", SecretName, dir, err)
		}
		return b, nil
	}
	certPEM, err := read(KeyCert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := read(KeyKey)
	if err != nil {
		return nil, err
	}
	hashHex, err := read(KeyTokenHash)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s and %s in %s: %w", KeyCert, KeyKey, dir, err)
	}
	hash, err := hex.DecodeString(string(bytes.TrimSpace(hashHex)))
	if err != nil || len(hash) != sha256.Size {
		return nil, errors.New(KeyTokenHash + " in " + dir + " is not a hex SHA-256")
	}
	return &serverCredentials{cert: &pair, tokenHash: hash}, nil
}
