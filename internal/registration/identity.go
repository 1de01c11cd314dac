package registration

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/names"
)

// An agent's identity: an Ed25519 key pair it makes once and keeps in a
// Secret of its own downstream (IdentitySecretName, which no chart renders,
// so helm uninstall leaves it). Every registration the agent makes is signed
// with it; the first grant records the public key on the Cluster
// (fleet.AgentIdentityKeyAnnotation), and the Cluster is registered again
// through a token not bound to its clientID, or through its recovery
// identity, only with a registration that key signed
// (docs/architecture.md "The handshake").

const (
	// IdentitySecretName is the agent's local Secret holding its identity
	// key and, once it has one, its recovery token and where to use it.
	// The agent makes it before its first registration and never deletes
	// it; neither does the controller's redeploy (which deletes only
	// AgentCredentialSecretName).
	IdentitySecretName = "fleet-agent-identity"

	// Keys of the identity Secret. The recovery token is stored with the
	// upstream it works for (KeyAPIServerURL, KeyAPIServerCA,
	// KeyAgentTLSMode) and the cluster it recovers (KeyClusterNamespace,
	// KeyClusterName, KeyDeploymentNamespace).
	KeyIdentitySeed    = "identityKey"     // the 32-byte Ed25519 seed
	KeyRecoveryToken   = "recoveryToken"   // bearer token of the recovery identity
	KeyRecoveryIssued  = "recoveryIssued"  // RFC 3339
	KeyRecoveryExpires = "recoveryExpires" // RFC 3339, as the API server answered

	// RecoveryServiceAccountName is a registered cluster's recovery
	// identity, in its cluster namespace: it may create and get
	// ClusterRegistrations in the cluster's workspace
	// (RecoveryIdentityClusterRole), and a registration it makes is granted
	// only when the key recorded on that cluster signed it. The agent keeps
	// a long-lived token of it, so it can register again by itself after
	// its request credential expired.
	RecoveryServiceAccountName = "fleet-agent-recovery"
	// RecoveryIdentityClusterRole (kustomize/base/rbac) is what a recovery
	// identity may do in its workspace, bound there by one RoleBinding
	// (RecoveryBindingName).
	RecoveryIdentityClusterRole = "fleet-recovery-identity"
	// RecoveryTokenTTL is the lifetime the agent asks for its recovery
	// token (the API server may shorten it); it mints a new one when a
	// third of the lifetime is left.
	RecoveryTokenTTL = 30 * 24 * time.Hour

	// RequestTimeWindow bounds how far the signed request time of a
	// registration may be from the registration's creation: wide for
	// clock skew, narrow enough that an old signature cannot be replayed.
	RequestTimeWindow = 10 * time.Minute
)

// RecoveryBindingName is the RoleBinding, in the workspace, that binds the
// recovery identity of Cluster cluster to RecoveryIdentityClusterRole.
func RecoveryBindingName(cluster string) string {
	return names.SafeConcatName(RecoveryServiceAccountName, cluster)
}

// RecoveryUsername is the user name of the recovery identity of the cluster
// namespace clusterNamespace, as the API server authenticates it.
func RecoveryUsername(clusterNamespace string) string {
	return "system:serviceaccount:" + clusterNamespace + ":" + RecoveryServiceAccountName
}

// IdentityKey is an agent's identity key pair.
type IdentityKey struct{ priv ed25519.PrivateKey }

// NewIdentityKey makes a key pair.
func NewIdentityKey() (*IdentityKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return &IdentityKey{priv: priv}, nil
}

// IdentityKeyFromSeed reads a key pair from its seed (KeyIdentitySeed).
func IdentityKeyFromSeed(seed []byte) (*IdentityKey, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("the identity key is %d bytes, not a %d-byte Ed25519 seed", len(seed), ed25519.SeedSize)
	}
	return &IdentityKey{priv: ed25519.NewKeyFromSeed(seed)}, nil
}

// Seed is what is kept of the key pair (KeyIdentitySeed).
func (k *IdentityKey) Seed() []byte { return k.priv.Seed() }

// PublicKey is the public key as registrations, Clusters and heartbeats
// carry it: base64 of its 32 bytes.
func (k *IdentityKey) PublicKey() string {
	return base64.StdEncoding.EncodeToString(k.priv.Public().(ed25519.PublicKey))
}

// Sign signs reg (its namespace, name, clientID, clientRandom,
// credentialPublicKey and the RequestedAtAnnotation, which must be set) and
// sets spec.identityPublicKey and spec.identitySignature.
func (k *IdentityKey) Sign(reg *fleet.ClusterRegistration) error {
	if reg.Name == "" || reg.Annotations[RequestedAtAnnotation] == "" {
		return errors.New("a registration is signed with its name and request time set")
	}
	reg.Spec.IdentityPublicKey = k.PublicKey()
	reg.Spec.IdentitySignature = base64.StdEncoding.EncodeToString(ed25519.Sign(k.priv, signedMessage(reg)))
	return nil
}

// Signed says whether reg claims an identity key (its signature may still
// be bad: VerifyRegistration).
func Signed(reg *fleet.ClusterRegistration) bool {
	return reg.Spec.IdentityPublicKey != "" || reg.Spec.IdentitySignature != ""
}

// VerifyRegistration checks the identity signature of a signed registration
// and that its signed request time is within RequestTimeWindow of its
// creation. Every error says what is wrong in words a person can act on;
// nothing of the input but its shape is echoed.
func VerifyRegistration(reg *fleet.ClusterRegistration) error {
	pub, err := ParseIdentityPublicKey(reg.Spec.IdentityPublicKey)
	if err != nil {
		return err
	}
	sig, err := base64.StdEncoding.DecodeString(reg.Spec.IdentitySignature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("spec.identitySignature is not the base64 of a %d-byte Ed25519 signature", ed25519.SignatureSize)
	}
	raw := reg.Annotations[RequestedAtAnnotation]
	at, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return fmt.Errorf("a signed registration needs its request time in annotation %s (RFC 3339), which is missing or malformed", RequestedAtAnnotation)
	}
	if !ed25519.Verify(pub, signedMessage(reg), sig) {
		return fmt.Errorf("spec.identitySignature does not verify with spec.identityPublicKey (key %s) over this registration's namespace, name, clientID, clientRandom, credentialPublicKey and request time", IdentityFingerprint(reg.Spec.IdentityPublicKey))
	}
	created := reg.CreationTimestamp.Time
	if d := at.Sub(created); d > RequestTimeWindow || d < -RequestTimeWindow {
		return fmt.Errorf("the signed request time %s is %s from the registration's creation (%s); at most %s is accepted, so an old signature cannot be used again: check the clocks of the downstream and upstream clusters",
			at.UTC().Format(time.RFC3339), d.Abs().Round(time.Second), created.UTC().Format(time.RFC3339), RequestTimeWindow)
	}
	return nil
}

// ParseIdentityPublicKey reads an identity public key (base64 of 32 bytes).
func ParseIdentityPublicKey(s string) (ed25519.PublicKey, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("the identity public key is not the base64 of a %d-byte Ed25519 public key", ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// SameIdentityKey says whether a and b are the same valid identity public
// key (compared as keys, not as strings).
func SameIdentityKey(a, b string) bool {
	ka, errA := ParseIdentityPublicKey(a)
	kb, errB := ParseIdentityPublicKey(b)
	return errA == nil && errB == nil && ka.Equal(kb)
}

// IdentityFingerprint is a short, printable name of an identity public key
// for messages: "sha256:" and 16 hex digits of the SHA-256 of what the key
// string holds.
func IdentityFingerprint(pub string) string {
	raw, err := base64.StdEncoding.DecodeString(pub)
	if err != nil {
		raw = []byte(pub)
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// signatureContext starts every signed message: what is signed, and the
// version of the encoding, so a signature of anything else (or of a later
// encoding) never verifies as one of this.
const signatureContext = "fleet.cattle.io/v1alpha1 ClusterRegistration identity signature v1"

// signedMessage is what the identity signature covers: the context, then
// each field as a 4-byte big-endian length and its bytes (no field can run
// into the next).
func signedMessage(reg *fleet.ClusterRegistration) []byte {
	var b bytes.Buffer
	b.WriteString(signatureContext)
	for _, f := range []string{
		reg.Namespace,
		reg.Name,
		reg.Spec.ClientID,
		reg.Spec.ClientRandom,
		reg.Spec.CredentialPublicKey,
		reg.Annotations[RequestedAtAnnotation],
	} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		b.Write(n[:])
		b.WriteString(f)
	}
	return b.Bytes()
}
