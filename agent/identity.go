package agent

import (
	"context"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// IdentityInvalidReason: the agent's identity Secret holds no usable key.
const IdentityInvalidReason = "IdentityKeyInvalid"

// identity is the agent's identity Secret as read: its key, and the
// recovery credential when it has one.
type identity struct {
	key      *registration.IdentityKey
	recovery *recoveryCredential
}

// recoveryCredential is a token of the cluster's recovery identity and
// where it works: the agent registers with it when its request credential
// was rejected and it has no bootstrap Secret (an agent offline past its
// credential's expiry).
type recoveryCredential struct {
	Token               string
	Issued, Expires     time.Time
	APIServerURL        string
	APIServerCA         []byte
	TLSMode             string
	ClusterNamespace    string // workspace
	ClusterName         string
	DeploymentNamespace string // cluster namespace, where the recovery ServiceAccount lives
}

// usable says whether the token has not expired (a minute of margin).
func (r *recoveryCredential) usable(now time.Time) bool {
	return r != nil && r.Token != "" && now.Add(time.Minute).Before(r.Expires)
}

// due says whether a new token should be minted for cred's cluster: there is
// none, it is another cluster's, or a third of its life is left.
func (r *recoveryCredential) due(cred *credential, now time.Time) bool {
	if r == nil || r.Token == "" || r.Issued.IsZero() || !r.Expires.After(r.Issued) ||
		r.DeploymentNamespace != cred.DeploymentNamespace || r.ClusterName != cred.ClusterName || r.ClusterNamespace != cred.ClusterNamespace ||
		r.APIServerURL != cred.APIServerURL {
		return true
	}
	return !now.Before(r.Issued.Add(r.Expires.Sub(r.Issued) * 2 / 3))
}

// ensureIdentity reads the agent's identity Secret, or makes it with a new
// key when there is none. It runs before the agent registers or reports in,
// so every registration is signed with the same key, also after a crash
// between a grant and storing its credential, and after helm uninstall and
// install (the chart does not render this Secret). A Secret whose key is
// unusable is a stuck state that names the fix, never silently replaced: the
// Cluster upstream records the key that was in it.
func (a *Agent) ensureIdentity(ctx context.Context) (*identity, error) {
	key := client.ObjectKey{Namespace: a.opts.Namespace, Name: registration.IdentitySecretName}
	s := &corev1.Secret{}
	err := a.local.Get(ctx, key, s)
	if apierrors.IsNotFound(err) {
		k, err := registration.NewIdentityKey()
		if err != nil {
			return nil, err
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{registration.KeyIdentitySeed: k.Seed()},
		}
		err = a.local.Create(ctx, s)
		if err == nil {
			a.log.Info("made the agent's identity key", "secret", key.String(), "key", registration.IdentityFingerprint(k.PublicKey()))
			return &identity{key: k}, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, localFault(err, "creating the identity Secret "+key.String())
		}
		err = a.local.Get(ctx, key, s)
	}
	if err != nil {
		return nil, localFault(err, "reading the identity Secret "+key.String())
	}
	k, err := registration.IdentityKeyFromSeed(s.Data[registration.KeyIdentitySeed])
	if err != nil {
		return nil, reconciler.Stall(IdentityInvalidReason,
			"Secret %s key %s: %v. Delete the Secret (the agent makes a new key), then recover the cluster upstream, whose Cluster records the old key: docs/operations.md \"Recovering a cluster\"",
			key, registration.KeyIdentitySeed, err)
	}
	return &identity{key: k, recovery: readRecovery(s.Data)}, nil
}

// readRecovery reads the recovery credential of the identity Secret's data;
// nil when there is none (or it is incomplete: it is minted again).
func readRecovery(d map[string][]byte) *recoveryCredential {
	r := &recoveryCredential{
		Token:               string(d[registration.KeyRecoveryToken]),
		APIServerURL:        string(d[registration.KeyAPIServerURL]),
		APIServerCA:         d[registration.KeyAPIServerCA],
		TLSMode:             string(d[registration.KeyAgentTLSMode]),
		ClusterNamespace:    string(d[registration.KeyClusterNamespace]),
		ClusterName:         string(d[registration.KeyClusterName]),
		DeploymentNamespace: string(d[registration.KeyDeploymentNamespace]),
	}
	r.Issued, _ = time.Parse(time.RFC3339, string(d[registration.KeyRecoveryIssued]))
	r.Expires, _ = time.Parse(time.RFC3339, string(d[registration.KeyRecoveryExpires]))
	if r.Token == "" || r.APIServerURL == "" || r.ClusterNamespace == "" || r.ClusterName == "" || r.DeploymentNamespace == "" || r.Expires.IsZero() {
		return nil
	}
	return r
}

// storeRecovery writes rec into the identity Secret (nil: removes the
// recovery credential), keeping the key.
func (a *Agent) storeRecovery(ctx context.Context, rec *recoveryCredential) error {
	s := &corev1.Secret{}
	if err := a.local.Get(ctx, client.ObjectKey{Namespace: a.opts.Namespace, Name: registration.IdentitySecretName}, s); err != nil {
		return err
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	fields := map[string][]byte{}
	if rec != nil {
		fields = map[string][]byte{
			registration.KeyRecoveryToken:       []byte(rec.Token),
			registration.KeyRecoveryIssued:      []byte(rec.Issued.UTC().Format(time.RFC3339)),
			registration.KeyRecoveryExpires:     []byte(rec.Expires.UTC().Format(time.RFC3339)),
			registration.KeyAPIServerURL:        []byte(rec.APIServerURL),
			registration.KeyAPIServerCA:         rec.APIServerCA,
			registration.KeyAgentTLSMode:        []byte(rec.TLSMode),
			registration.KeyClusterNamespace:    []byte(rec.ClusterNamespace),
			registration.KeyClusterName:         []byte(rec.ClusterName),
			registration.KeyDeploymentNamespace: []byte(rec.DeploymentNamespace),
		}
	}
	for _, k := range []string{registration.KeyRecoveryToken, registration.KeyRecoveryIssued, registration.KeyRecoveryExpires, registration.KeyAPIServerURL,
		registration.KeyAPIServerCA, registration.KeyAgentTLSMode, registration.KeyClusterNamespace, registration.KeyClusterName, registration.KeyDeploymentNamespace} {
		if v, ok := fields[k]; ok {
			s.Data[k] = v
		} else {
			delete(s.Data, k)
		}
	}
	if err := a.local.Update(ctx, s); err != nil {
		return err
	}
	a.mu.Lock()
	a.recovery = rec
	a.mu.Unlock()
	return nil
}

// forgetRecovery drops a recovery credential the upstream will never accept
// again, so the agent stops registering with it.
func (a *Agent) forgetRecovery(ctx context.Context, why string) {
	if err := a.storeRecovery(ctx, nil); err != nil {
		a.log.Error(err, "could not remove the recovery token from the identity Secret")
		return
	}
	a.log.Info("removed the recovery token: the upstream will not accept it again", "reason", why)
}

// ensureRecoveryToken mints a token of the cluster's recovery identity with
// the request identity, when the agent has none for this cluster or a third
// of its life is left, and stores it with where it works. The recovery
// ServiceAccount is made by the controller once the Cluster records the
// agent's key, moments after its first heartbeat: until then the request
// is answered NotFound and tried again at the next heartbeat.
func (s *session) ensureRecoveryToken(ctx context.Context) {
	a := s.agent
	cred := s.current()
	a.mu.Lock()
	rec := a.recovery
	a.mu.Unlock()
	now := time.Now()
	if !rec.due(cred, now) {
		return
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: cred.DeploymentNamespace, Name: registration.RecoveryServiceAccountName}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(registration.RecoveryTokenTTL / time.Second))}}
	if err := s.up.SubResource("token").Create(ctx, sa, tr); err != nil {
		if apierrors.IsNotFound(err) {
			a.log.V(1).Info("the cluster's recovery identity is not made yet; asking again at the next heartbeat", "serviceAccount", cred.DeploymentNamespace+"/"+registration.RecoveryServiceAccountName)
			return
		}
		a.log.Error(err, "could not mint a token of the cluster's recovery identity; trying again at the next heartbeat")
		return
	}
	next := &recoveryCredential{
		Token: tr.Status.Token, Issued: now, Expires: tr.Status.ExpirationTimestamp.Time,
		APIServerURL: cred.APIServerURL, APIServerCA: cred.APIServerCA, TLSMode: cred.TLSMode,
		ClusterNamespace: cred.ClusterNamespace, ClusterName: cred.ClusterName, DeploymentNamespace: cred.DeploymentNamespace,
	}
	if err := a.storeRecovery(ctx, next); err != nil {
		a.log.Error(err, "could not store the recovery token; minting one again at the next heartbeat")
		return
	}
	a.log.Info("stored a token of the cluster's recovery identity", "expires", next.Expires.UTC().Format(time.RFC3339))
}
