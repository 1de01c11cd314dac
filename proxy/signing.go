package proxy

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"

	"github.com/gitops-fleet/fleet/internal/assertion"
)

// SigningSecret holds fleet-proxy's private signing keys, in the
// controller's namespace.
const SigningSecret = "fleet-proxy-signing"

// Keys of the signing Secret: the key that signs, and (during a rotation) a
// key that is published but does not sign yet or any more. Both are PEM
// PKCS#8 Ed25519 private keys.
const (
	SigningKeyCurrent = "current.key"
	SigningKeyOther   = "previous.key"
)

// SigningKeys signs assertions with the current key and publishes the
// public keys of the Secret.
type SigningKeys struct {
	signer *assertion.Signer
	keys   *assertion.KeySet
}

var (
	_ Asserter = (*SigningKeys)(nil)
	_ KeySet   = (*SigningKeys)(nil)
)

// Assert signs an assertion naming u for audience "<ws>/<cluster>".
func (k *SigningKeys) Assert(u user.Info, audience string) (string, error) {
	return k.signer.Sign(assertion.Identity{User: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra()}, audience, time.Now())
}

// JWKS is the JWK Set of the public keys.
func (k *SigningKeys) JWKS() ([]byte, error) { return json.Marshal(k.keys) }

// KeySet is the set of public keys (for tests and the agent side).
func (k *SigningKeys) KeySet() *assertion.KeySet { return k.keys }

// EnsureSigningKeys reads Secret fleet-proxy-signing in namespace, making it
// with a new key if it is missing (two replicas making it at once agree on
// the one that was created first).
func EnsureSigningKeys(ctx context.Context, c kubernetes.Interface, namespace string) (*SigningKeys, error) {
	secrets := c.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, SigningSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		pemKey, genErr := newSigningKey()
		if genErr != nil {
			return nil, genErr
		}
		s, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: SigningSecret,
				Labels: map[string]string{"app.kubernetes.io/name": "fleet-proxy"}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{SigningKeyCurrent: pemKey},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			s, err = secrets.Get(ctx, SigningSecret, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, SigningSecret, err)
	}
	return signingKeysFrom(s)
}

func signingKeysFrom(s *corev1.Secret) (*SigningKeys, error) {
	var current ed25519.PrivateKey
	var pubs []ed25519.PublicKey
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range s.Data {
			if !yield(k) {
				return
			}
		}
	}) {
		if !strings.HasSuffix(k, ".key") {
			continue
		}
		key, err := parseSigningKey(s.Data[k])
		if err != nil {
			return nil, fmt.Errorf("Secret %s/%s key %s: %w", s.Namespace, s.Name, k, err)
		}
		pubs = append(pubs, key.Public().(ed25519.PublicKey))
		if k == SigningKeyCurrent {
			current = key
		}
	}
	if current == nil {
		return nil, fmt.Errorf("Secret %s/%s has no %s", s.Namespace, s.Name, SigningKeyCurrent)
	}
	signer, err := assertion.NewSigner(current, assertion.MaxLifetime)
	if err != nil {
		return nil, err
	}
	return &SigningKeys{signer: signer, keys: assertion.NewKeySet(pubs...)}, nil
}

func newSigningKey() ([]byte, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseSigningKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("not a PEM PKCS#8 private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not a PKCS#8 private key")
	}
	ed, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("not an Ed25519 key")
	}
	return ed, nil
}
