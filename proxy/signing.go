package proxy

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gitops-fleet/fleet/internal/assertion"
)

// fleet-proxy's signing keys (docs/design/cluster-access.md, "The identity
// assertion"): each replica makes its own Ed25519 key at start and keeps it
// in memory only, so no private key is ever at rest where another identity
// (the controller reads every Secret) could read it. A replica publishes its
// public key in ConfigMap SigningKeysConfigMap, which only fleet-proxy's
// identity may write, with the time it last refreshed it; every replica
// serves the union of the published keys at signingkeys, so an agent that
// read the keys through any replica verifies what every replica signs. A
// key stays published for KeyRetention after its replica last refreshed it
// (the replica stopped or restarted), the longest lifetime of anything it
// signed plus a margin, and is then dropped.

const (
	// SigningKeysConfigMap holds every replica's public key, in fleet-proxy's
	// namespace: one data key per signing key (its kid), whose value is a
	// publishedKey.
	SigningKeysConfigMap = "fleet-proxy-signing-keys"
	// LegacySigningSecret held the private signing keys in earlier
	// releases, where the controller could read them; fleet-proxy deletes
	// it at start (and at every refresh, should an older replica make it
	// again during an upgrade). Its keys are not published.
	LegacySigningSecret = "fleet-proxy-signing"
	// KeyRetention is how long a key stays published after its replica last
	// refreshed it: the longest lifetime of a token it signs (a direct
	// token, 24 h) plus a margin for the refresh interval and for clocks.
	KeyRetention = assertion.MaxDirectLifetime + time.Hour
	// DefaultKeyRefreshInterval is how often a replica refreshes its entry.
	DefaultKeyRefreshInterval = 10 * time.Minute
	// MaxPublishedKeys bounds the entries (a replica restarting in a loop
	// makes a key each time): beyond it the least recently refreshed go
	// first, and the tokens they signed stop verifying.
	MaxPublishedKeys = 256
)

// publishedKey is one replica's entry in SigningKeysConfigMap.
type publishedKey struct {
	// PublicKey is the raw Ed25519 public key (base64 in JSON).
	PublicKey []byte `json:"publicKey"`
	// Replica names the replica (for people reading the ConfigMap).
	Replica string `json:"replica,omitempty"`
	// Refreshed is when the replica last wrote the entry.
	Refreshed time.Time `json:"refreshed"`
}

// SigningOptions configure StartSigningKeys.
type SigningOptions struct {
	// Client writes SigningKeysConfigMap and reads it through an informer.
	Client kubernetes.Interface
	// Namespace is fleet-proxy's namespace.
	Namespace string
	// Replica names this replica in its entry.
	Replica string
	// Key is the private key to sign with (nil: a new one). Tests give
	// one to make tokens fleet-proxy would never issue.
	Key ed25519.PrivateKey
	// RefreshInterval (zero: DefaultKeyRefreshInterval) and Retention
	// (zero: KeyRetention).
	RefreshInterval, Retention time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Log (zero: the controller-runtime logger).
	Log logr.Logger
}

// SigningKeys signs assertions and direct tokens with this replica's key,
// once it is published, and serves the public keys of every replica.
type SigningKeys struct {
	opts   SigningOptions
	signer *assertion.Signer
	// lister reads the ConfigMap (set by Start, under mu).
	lister cache.Indexer
	// republish asks the refresh loop to write the entry again now (it
	// went missing from the ConfigMap).
	republish chan struct{}

	// parsed are the entries of the ConfigMap at resourceVersion (every
	// signature checks its own entry: parse once per change).
	mu       sync.Mutex
	parsedRV string
	parsed   map[string]publishedKey
}

var (
	_ Asserter     = (*SigningKeys)(nil)
	_ KeySet       = (*SigningKeys)(nil)
	_ DirectIssuer = (*SigningKeys)(nil)
)

// StartSigningKeys is NewSigningKeys, then Start.
func StartSigningKeys(ctx context.Context, opts SigningOptions) (*SigningKeys, error) {
	k, err := NewSigningKeys(opts)
	if err != nil {
		return nil, err
	}
	if err := k.Start(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// NewSigningKeys makes this replica's key (or takes opts.Key). It signs
// nothing before Start has published it.
func NewSigningKeys(opts SigningOptions) (*SigningKeys, error) {
	if opts.Client == nil || opts.Namespace == "" {
		return nil, errors.New("proxy: signing keys need a Client and a Namespace")
	}
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = DefaultKeyRefreshInterval
	}
	if opts.Retention <= 0 {
		opts.Retention = KeyRetention
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log.GetSink() == nil {
		opts.Log = log.Log.WithName("signing-keys")
	}
	key := opts.Key
	if key == nil {
		var err error
		if _, key, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return nil, fmt.Errorf("making the signing key: %w", err)
		}
	}
	signer, err := assertion.NewSigner(key, assertion.MaxLifetime)
	if err != nil {
		return nil, err
	}
	return &SigningKeys{opts: opts, signer: signer, republish: make(chan struct{}, 1)}, nil
}

// Start deletes the Secret of earlier releases, publishes the public key
// and returns once the informer shows it published, so nothing is signed
// before agents can read the key through any replica. Until ctx ends it
// refreshes the entry every RefreshInterval (and at once when it goes
// missing) and drops the entries of replicas not refreshed for Retention.
// Call it once.
func (k *SigningKeys) Start(ctx context.Context) error {
	opts := k.opts
	k.deleteLegacySecret(ctx)
	if err := k.publish(ctx); err != nil {
		return err
	}
	// Only the one ConfigMap (RBAC may limit list and watch to its name).
	f := informers.NewSharedInformerFactoryWithOptions(opts.Client, 10*time.Minute, informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", SigningKeysConfigMap).String()
		}))
	inf := f.Core().V1().ConfigMaps().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { k.checkPublished() },
		UpdateFunc: func(any, any) { k.checkPublished() },
		DeleteFunc: func(any) { k.checkPublished() },
	}); err != nil {
		return err
	}
	k.mu.Lock()
	k.lister = inf.GetIndexer()
	k.mu.Unlock()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("reading ConfigMap %s/%s: %w", opts.Namespace, SigningKeysConfigMap, ctx.Err())
	}
	// The refresh loop runs already: an entry removed meanwhile is written
	// again.
	go k.run(ctx)
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return k.publishedUntil().After(k.opts.Now()), nil
	}); err != nil {
		return fmt.Errorf("waiting for the signing key %s in ConfigMap %s/%s: %w", k.signer.KeyID(), opts.Namespace, SigningKeysConfigMap, err)
	}
	opts.Log.Info("signing key published", "kid", k.signer.KeyID(), "configMap", opts.Namespace+"/"+SigningKeysConfigMap)
	return nil
}

// KeyID is the kid of this replica's key.
func (k *SigningKeys) KeyID() string { return k.signer.KeyID() }

// Assert signs an assertion naming u for audience "<ws>/<cluster>".
func (k *SigningKeys) Assert(u user.Info, audience string) (string, error) {
	now := k.opts.Now()
	if err := k.checkSignable(now, assertion.MaxLifetime); err != nil {
		return "", err
	}
	return k.signer.Sign(identityOf(u), audience, now)
}

func identityOf(u user.Info) assertion.Identity {
	return assertion.Identity{User: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra()}
}

// checkSignable refuses to sign what would outlive the publication of the
// key: the entry, as every replica reads it, stays published until its
// refresh time plus Retention.
func (k *SigningKeys) checkSignable(now time.Time, lifetime time.Duration) error {
	if until := k.publishedUntil(); now.Add(lifetime).After(until) {
		return fmt.Errorf("fleet-proxy's signing key %s is not published in ConfigMap %s/%s for as long as the token would live (until %s): it cannot be refreshed; see fleet-proxy's log",
			k.signer.KeyID(), k.opts.Namespace, SigningKeysConfigMap, until.UTC().Format(time.RFC3339))
	}
	return nil
}

// JWKS is the JWK Set of every published key.
func (k *SigningKeys) JWKS() ([]byte, error) { return json.Marshal(k.KeySet()) }

// KeySet is the set of every published key that is not stale, and this
// replica's own (for tests and the agent side).
func (k *SigningKeys) KeySet() *assertion.KeySet {
	now := k.opts.Now()
	pubs := []ed25519.PublicKey{k.signer.PublicKey()}
	for _, e := range k.published() {
		if !e.stale(now, k.opts.Retention) {
			pubs = append(pubs, e.PublicKey)
		}
	}
	return assertion.NewKeySet(pubs...)
}

// published are the valid entries of the ConfigMap as the informer holds
// it, by kid.
func (k *SigningKeys) published() map[string]publishedKey {
	k.mu.Lock()
	lister := k.lister
	k.mu.Unlock()
	if lister == nil {
		return nil
	}
	obj, ok, err := lister.GetByKey(k.opts.Namespace + "/" + SigningKeysConfigMap)
	if err != nil || !ok {
		return nil
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.parsed == nil || cm.ResourceVersion != k.parsedRV {
		k.parsed, _ = parseEntries(cm.Data)
		k.parsedRV = cm.ResourceVersion
	}
	return k.parsed
}

// publishedUntil is when this replica's key stops being published, as the
// informer shows the ConfigMap (zero: it is not published).
func (k *SigningKeys) publishedUntil() time.Time {
	e, ok := k.published()[k.signer.KeyID()]
	if !ok {
		return time.Time{}
	}
	return e.Refreshed.Add(k.opts.Retention)
}

// checkPublished asks for the entry to be written again when it is gone
// from the ConfigMap (deleted, or pruned by a replica with a fast clock).
func (k *SigningKeys) checkPublished() {
	if _, ok := k.published()[k.signer.KeyID()]; ok {
		return
	}
	select {
	case k.republish <- struct{}{}:
	default:
	}
}

// retryAfterFailure is how soon a failed refresh is tried again.
const retryAfterFailure = 30 * time.Second

// run refreshes the entry until ctx ends.
func (k *SigningKeys) run(ctx context.Context) {
	next := k.opts.RefreshInterval
	for {
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-k.republish:
			t.Stop()
		}
		next = k.opts.RefreshInterval
		if err := k.publish(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			k.opts.Log.Error(err, "refreshing the signing key; trying again", "kid", k.signer.KeyID(), "in", retryAfterFailure.String(),
				"publishedUntil", k.publishedUntil().UTC().Format(time.RFC3339))
			next = min(retryAfterFailure, k.opts.RefreshInterval)
		}
		k.deleteLegacySecret(ctx)
	}
}

// publish writes this replica's entry with the time now and drops the
// entries that are stale, unreadable, or beyond MaxPublishedKeys (read,
// modify, write, tried again on a conflict with another replica).
func (k *SigningKeys) publish(ctx context.Context) error {
	cms := k.opts.Client.CoreV1().ConfigMaps(k.opts.Namespace)
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait.Jitter(100*time.Millisecond, 1)):
			}
		}
		var cm *corev1.ConfigMap
		cm, err = cms.Get(ctx, SigningKeysConfigMap, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: k.opts.Namespace, Name: SigningKeysConfigMap,
				Labels: map[string]string{"app.kubernetes.io/name": "fleet-proxy"}}}
			cm.Data, err = k.entries(nil)
			if err != nil {
				return err
			}
			if _, err = cms.Create(ctx, cm, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
				continue
			}
		case err != nil:
		default:
			cm.Data, err = k.entries(cm.Data)
			if err != nil {
				return err
			}
			if _, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
				continue
			}
		}
		break
	}
	if err != nil {
		return fmt.Errorf("publishing the signing key in ConfigMap %s/%s (fleet-proxy's Role must allow it): %w", k.opts.Namespace, SigningKeysConfigMap, err)
	}
	return nil
}

// entries is data with this replica's entry refreshed now and the entries
// to drop dropped (each logged).
func (k *SigningKeys) entries(data map[string]string) (map[string]string, error) {
	now := k.opts.Now()
	own := k.signer.KeyID()
	parsed, bad := parseEntries(data)
	for _, kid := range bad {
		k.opts.Log.Info("dropping an unreadable signing key entry", "kid", kid)
	}
	keep := map[string]publishedKey{}
	for kid, e := range parsed {
		if kid == own {
			continue
		}
		if e.stale(now, k.opts.Retention) {
			k.opts.Log.Info("dropping a signing key not refreshed for longer than the longest token it signed lives", "kid", kid, "replica", e.Replica,
				"refreshed", e.Refreshed.UTC().Format(time.RFC3339))
			continue
		}
		keep[kid] = e
	}
	if over := len(keep) + 1 - MaxPublishedKeys; over > 0 {
		byAge := slices.SortedFunc(maps.Keys(keep), func(a, b string) int { return keep[a].Refreshed.Compare(keep[b].Refreshed) })
		for _, kid := range byAge[:over] {
			k.opts.Log.Info("dropping a signing key: more than the published maximum (replicas restarting in a loop?); tokens it signed no longer verify",
				"kid", kid, "replica", keep[kid].Replica, "max", MaxPublishedKeys)
			delete(keep, kid)
		}
	}
	keep[own] = publishedKey{PublicKey: k.signer.PublicKey(), Replica: k.opts.Replica, Refreshed: now.UTC().Truncate(time.Second)}
	out := make(map[string]string, len(keep))
	for kid, e := range keep {
		b, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		out[kid] = string(b)
	}
	return out, nil
}

// parseEntries reads the ConfigMap's entries: a public Ed25519 key whose
// kid is its data key, and a refresh time. The kids of entries that are
// not are returned as bad.
func parseEntries(data map[string]string) (map[string]publishedKey, []string) {
	out := map[string]publishedKey{}
	var bad []string
	for kid, v := range data {
		var e publishedKey
		if json.Unmarshal([]byte(v), &e) != nil || len(e.PublicKey) != ed25519.PublicKeySize ||
			assertion.KeyID(e.PublicKey) != kid || e.Refreshed.IsZero() {
			bad = append(bad, kid)
			continue
		}
		out[kid] = e
	}
	slices.Sort(bad)
	return out, bad
}

// stale: not refreshed for longer than retention.
func (e publishedKey) stale(now time.Time, retention time.Duration) bool {
	return now.Sub(e.Refreshed) > retention
}

// deleteLegacySecret deletes the Secret that held the private keys in
// earlier releases (where the controller could read them).
func (k *SigningKeys) deleteLegacySecret(ctx context.Context) {
	err := k.opts.Client.CoreV1().Secrets(k.opts.Namespace).Delete(ctx, LegacySigningSecret, metav1.DeleteOptions{})
	switch {
	case err == nil:
		k.opts.Log.Info("deleted the signing key Secret of an earlier release: its key is no longer published, so direct tokens it signed no longer verify",
			"secret", k.opts.Namespace+"/"+LegacySigningSecret)
	case apierrors.IsNotFound(err) || ctx.Err() != nil:
	default:
		k.opts.Log.Error(err, "cannot delete the signing key Secret of an earlier release (its key is not published any more, but the Secret holds a private key: delete it)",
			"secret", k.opts.Namespace+"/"+LegacySigningSecret)
	}
}
