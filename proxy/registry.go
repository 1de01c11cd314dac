package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/log"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/assertion"
)

// The registry of issued direct tokens: one small ConfigMap per token in
// fleet-proxy's namespace (who holds it, what it carries, what it is bound
// to, until when, whether it is revoked; never the token), read through an
// informer. An issue creates one object, a revocation updates one, an
// expired token's is deleted: the cost of a write does not grow with the
// number of live tokens, and every replica sees every record, so two
// replicas and a restart agree. The agents' revocation lists are derived
// from the records.

const (
	// tokenLabel marks a token record ("true").
	tokenLabel = "fleet.cattle.io/direct-token"
	// tokenClusterLabel and tokenUserLabel index the records: the first 16
	// hex of the SHA-256 of "<workspace>/<cluster>" and of the user name.
	tokenClusterLabel = "fleet.cattle.io/direct-cluster"
	tokenUserLabel    = "fleet.cattle.io/direct-user"
	// tokenClusterAnnotation names the Cluster of a record in clear.
	tokenClusterAnnotation = "fleet.cattle.io/cluster"
	tokenDataKey           = "token.json"
	tokenNamePrefix        = "fleet-direct-token-"

	// legacyRegistryLabel marks the one-ConfigMap-per-Cluster registries of
	// earlier releases (key tokens.json); their live tokens are revoked.
	legacyRegistryLabel = "fleet.cattle.io/direct-tokens"
	legacyRegistryKey   = "tokens.json"

	// MaxDirectTokensPerCluster bounds the live, unrevoked tokens of one
	// cluster (the revoked ones are bounded by each holder's rate).
	MaxDirectTokensPerCluster = 2000
	// DefaultDirectTokensPerUser is how many live, unrevoked tokens one
	// user may hold for one Cluster: a new one revokes the oldest.
	DefaultDirectTokensPerUser = 10
	// DefaultDirectIssueLimit tokens per DefaultDirectIssueWindow may one
	// user ask for one Cluster; more get 429 with Retry-After.
	DefaultDirectIssueLimit  = 20
	DefaultDirectIssueWindow = time.Hour

	byCluster = "cluster"
	byHolder  = "holder"
)

// TokenRecordName is the ConfigMap of the token with jti id.
func TokenRecordName(id string) string { return tokenNamePrefix + id }

// LegacyRegistryName is the registry of Cluster key of earlier releases.
func LegacyRegistryName(key string) string { return "fleet-direct-" + shortHash(key) }

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:16]
}

// boundObject is an object a token's holder or credential is bound to,
// by UID: the token is revoked when it is gone or made again.
type boundObject struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

func (b *boundObject) String() string { return b.Namespace + "/" + b.Name }

// issued is one token's record.
type issued struct {
	ID      string              `json:"id"`
	Cluster string              `json:"cluster"`
	User    string              `json:"user"`
	UID     string              `json:"uid,omitempty"`
	Groups  []string            `json:"groups,omitempty"`
	Extra   map[string][]string `json:"extra,omitempty"`
	Verbs   []string            `json:"verbs"`
	// IssuedAt counts the issue against the holder's rate limit (a record
	// is kept until its expiry and the rate window have passed).
	IssuedAt time.Time `json:"issuedAt"`
	Expiry   time.Time `json:"expiry"`
	// LimitedBy says why the token lives less than asked, if it does.
	LimitedBy string `json:"limitedBy,omitempty"`
	// ServiceAccount is the holder's ServiceAccount (a ServiceAccount
	// user), Pod the pod its credential was bound to.
	ServiceAccount *boundObject `json:"serviceAccount,omitempty"`
	Pod            *boundObject `json:"pod,omitempty"`
	RevokedAt      *time.Time   `json:"revokedAt,omitempty"`
	RevokedReason  string       `json:"revokedReason,omitempty"`
}

func (t *issued) userInfo() user.Info {
	return &user.DefaultInfo{Name: t.User, UID: t.UID, Groups: append(slices.Clone(t.Groups), user.AllAuthenticated), Extra: t.Extra}
}

func (t *issued) expired(now time.Time) bool { return !now.Before(t.Expiry.Add(assertion.Skew)) }

// RegistryOptions configure a Registry.
type RegistryOptions struct {
	// Client writes the records (ConfigMaps of Namespace).
	Client kubernetes.Interface
	// Metadata reads the objects tokens are bound to (ServiceAccounts,
	// pods; metadata only).
	Metadata metadata.Interface
	// Namespace is fleet-proxy's.
	Namespace string
	// PerUser live, unrevoked tokens per user and Cluster (zero:
	// DefaultDirectTokensPerUser); a new one revokes the oldest.
	PerUser int
	// IssueLimit issues per IssueWindow per user and Cluster (zero:
	// DefaultDirectIssueLimit per DefaultDirectIssueWindow).
	IssueLimit  int
	IssueWindow time.Duration
}

// Registry is where issued direct tokens are recorded.
type Registry struct {
	opts     RegistryOptions
	cms      func() configMapsClient
	informer toolscache.SharedIndexInformer
	factory  informers.SharedInformerFactory
	// locks serialize issues of one holder on this replica (admission,
	// record, quota), by hash.
	locks [64]sync.Mutex
}

type configMapsClient interface {
	Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
	Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error)
	Get(context.Context, string, metav1.GetOptions) (*corev1.ConfigMap, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
	List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error)
}

// NewRegistry returns a registry; Start fills its cache.
func NewRegistry(opts RegistryOptions) (*Registry, error) {
	if opts.Client == nil || opts.Metadata == nil || opts.Namespace == "" {
		return nil, errors.New("proxy: a registry needs Client, Metadata and Namespace")
	}
	if opts.PerUser <= 0 {
		opts.PerUser = DefaultDirectTokensPerUser
	}
	if opts.IssueLimit <= 0 {
		opts.IssueLimit = DefaultDirectIssueLimit
	}
	if opts.IssueWindow <= 0 {
		opts.IssueWindow = DefaultDirectIssueWindow
	}
	f := informers.NewSharedInformerFactoryWithOptions(opts.Client, 10*time.Minute, informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = tokenLabel + "=true" }))
	inf := f.Core().V1().ConfigMaps().Informer()
	if err := inf.AddIndexers(toolscache.Indexers{
		byCluster: func(obj any) ([]string, error) {
			cm, ok := obj.(*corev1.ConfigMap)
			if !ok {
				return nil, nil
			}
			return []string{cm.Labels[tokenClusterLabel]}, nil
		},
		byHolder: func(obj any) ([]string, error) {
			cm, ok := obj.(*corev1.ConfigMap)
			if !ok {
				return nil, nil
			}
			return []string{cm.Labels[tokenClusterLabel] + "/" + cm.Labels[tokenUserLabel]}, nil
		},
	}); err != nil {
		return nil, err
	}
	r := &Registry{opts: opts, informer: inf, factory: f}
	r.cms = func() configMapsClient { return opts.Client.CoreV1().ConfigMaps(opts.Namespace) }
	return r, nil
}

// Start starts the informer and waits (up to a minute) for it to fill.
func (r *Registry) Start(ctx context.Context) error {
	r.factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !toolscache.WaitForCacheSync(syncCtx.Done(), r.informer.HasSynced) {
		return errors.New("the cache of direct token records did not fill")
	}
	return nil
}

func decodeRecord(cm *corev1.ConfigMap) (*issued, error) {
	var t issued
	if err := json.Unmarshal([]byte(cm.Data[tokenDataKey]), &t); err != nil || t.ID == "" || t.Cluster == "" {
		return nil, fmt.Errorf("ConfigMap %s/%s is not a direct token record", cm.Namespace, cm.Name)
	}
	return &t, nil
}

// records returns the cached records of index value v, oldest first,
// those of another Cluster (a hash collision) left out.
func (r *Registry) records(index, v, key string) []*issued {
	objs, _ := r.informer.GetIndexer().ByIndex(index, v)
	out := make([]*issued, 0, len(objs))
	for _, o := range objs {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		if t, err := decodeRecord(cm); err == nil && t.Cluster == key {
			out = append(out, t)
		}
	}
	sortOldestFirst(out)
	return out
}

func sortOldestFirst(ts []*issued) {
	slices.SortFunc(ts, func(a, b *issued) int {
		if c := a.IssuedAt.Compare(b.IssuedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

func (r *Registry) holderRecords(key, user string) []*issued {
	return r.records(byHolder, shortHash(key)+"/"+shortHash(user), key)
}

// lock serializes the issues of one holder on this replica.
func (r *Registry) lock(key, user string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key + "\x00" + user))
	m := &r.locks[h.Sum32()%uint32(len(r.locks))]
	m.Lock()
	return m.Unlock
}

// tooMany is a refusal to issue: 429 with Retry-After.
type tooMany struct {
	msg        string
	retryAfter time.Duration
}

func (e *tooMany) Error() string { return e.msg }

// admit decides whether user may be issued another token for Cluster key
// now: at most IssueLimit issues in any IssueWindow, and at most
// MaxDirectTokensPerCluster live, unrevoked tokens in the Cluster.
func (r *Registry) admit(key, user string, now time.Time) error {
	var recent []*issued
	for _, t := range r.holderRecords(key, user) {
		if now.Sub(t.IssuedAt) < r.opts.IssueWindow {
			recent = append(recent, t)
		}
	}
	if len(recent) >= r.opts.IssueLimit {
		next := recent[len(recent)-r.opts.IssueLimit].IssuedAt.Add(r.opts.IssueWindow)
		return &tooMany{
			msg: fmt.Sprintf("user %q was issued %d direct tokens for Cluster %s in the last %s, the most allowed: ask again after %s (or use a token already issued)",
				user, len(recent), key, r.opts.IssueWindow, next.UTC().Format(time.RFC3339)),
			retryAfter: next.Sub(now),
		}
	}
	// Revoked tokens do not count: one holder's churn (bounded by the
	// rate) cannot fill the Cluster for others.
	live := 0
	for _, t := range r.records(byCluster, shortHash(key), key) {
		if !t.expired(now) && t.RevokedAt == nil {
			live++
		}
	}
	if live >= MaxDirectTokensPerCluster {
		return &tooMany{msg: fmt.Sprintf("Cluster %s has %d live direct tokens, the most allowed: ask again once some have expired", key, live),
			retryAfter: time.Minute}
	}
	return nil
}

// record creates the record of a newly issued token and waits (briefly)
// until the cache holds it, so the next decision of this replica counts it.
func (r *Registry) record(ctx context.Context, t *issued) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.Namespace, Name: TokenRecordName(t.ID),
			Labels: map[string]string{tokenLabel: "true", tokenClusterLabel: shortHash(t.Cluster), tokenUserLabel: shortHash(t.User),
				"app.kubernetes.io/name": "fleet-proxy"},
			Annotations: map[string]string{tokenClusterAnnotation: t.Cluster}},
		Data: map[string]string{tokenDataKey: string(b)},
	}
	if _, err := r.cms().Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	cacheKey := r.opts.Namespace + "/" + cm.Name
	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, ok, _ := r.informer.GetIndexer().GetByKey(cacheKey)
		return ok, nil
	})
	return nil
}

// revoke marks t revoked (one update of its record, from the API server's
// version on a conflict). A record already revoked or gone is left.
func (r *Registry) revoke(ctx context.Context, t *issued, reason string, now time.Time) (bool, error) {
	done := false
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cm, err := r.cms().Get(ctx, TokenRecordName(t.ID), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		cur, err := decodeRecord(cm)
		if err != nil {
			return err
		}
		if cur.RevokedAt != nil {
			return nil
		}
		at := now.UTC()
		cur.RevokedAt, cur.RevokedReason = &at, reason
		b, err := json.Marshal(cur)
		if err != nil {
			return err
		}
		cm.Data = map[string]string{tokenDataKey: string(b)}
		if _, err := r.cms().Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return err
		}
		done = true
		return nil
	})
	if done {
		log.FromContext(ctx).Info("revoked a direct token", "cluster", t.Cluster, "user", t.User, "token", t.ID, "reason", reason)
	}
	return done, err
}

// enforceQuota revokes the oldest live, unrevoked tokens of user for
// Cluster key beyond PerUser, and returns how many it revoked.
func (r *Registry) enforceQuota(ctx context.Context, key, user string, now time.Time) (int, error) {
	var held []*issued
	for _, t := range r.holderRecords(key, user) {
		if t.RevokedAt == nil && !t.expired(now) {
			held = append(held, t)
		}
	}
	return r.revokeOldest(ctx, held, now)
}

func (r *Registry) revokeOldest(ctx context.Context, held []*issued, now time.Time) (int, error) {
	n := 0
	var errs []error
	for i := 0; i < len(held)-r.opts.PerUser; i++ {
		ok, err := r.revoke(ctx, held[i], fmt.Sprintf("its holder was issued more than %d newer tokens for the Cluster; the oldest are revoked", r.opts.PerUser), now)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// revoked returns the revoked tokens of Cluster key that have not expired,
// sorted by id, and their ETag (a hash of the list).
func (r *Registry) revoked(key string, now time.Time) ([]proxyv1.RevokedToken, string) {
	out := []proxyv1.RevokedToken{}
	for _, t := range r.records(byCluster, shortHash(key), key) {
		if t.RevokedAt != nil && !t.expired(now) {
			out = append(out, proxyv1.RevokedToken{ID: t.ID, Expiry: t.Expiry})
		}
	}
	slices.SortFunc(out, func(a, b proxyv1.RevokedToken) int { return strings.Compare(a.ID, b.ID) })
	h := sha256.New()
	for _, e := range out {
		fmt.Fprintf(h, "%s %d\n", e.ID, e.Expiry.Unix())
	}
	return out, hex.EncodeToString(h.Sum(nil))[:16]
}

// legacyIssued is an entry of an earlier release's registry.
type legacyIssued struct {
	ID        string     `json:"id"`
	User      string     `json:"user"`
	UID       string     `json:"uid,omitempty"`
	Verbs     []string   `json:"verbs"`
	Expiry    time.Time  `json:"expiry"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
}

// legacyRevokedReason is why tokens of an earlier release are revoked.
const legacyRevokedReason = "issued by an earlier release, which did not bind tokens to their holder's credential: ask for a new one"

// migrateLegacy revokes every live token of the registries of earlier
// releases (one revoked record each, so agents refuse it) and deletes
// those registries. It runs at every recheck: a replica of the earlier
// release may still record tokens during a rolling upgrade.
func (r *Registry) migrateLegacy(ctx context.Context, now time.Time) (int, error) {
	list, err := r.cms().List(ctx, metav1.ListOptions{LabelSelector: legacyRegistryLabel + "=true"})
	if err != nil {
		return 0, fmt.Errorf("listing the direct token registries of an earlier release: %w", err)
	}
	n := 0
	var errs []error
	for i := range list.Items {
		cm := &list.Items[i]
		key := cm.Annotations[tokenClusterAnnotation]
		var old []legacyIssued
		if err := json.Unmarshal([]byte(cm.Data[legacyRegistryKey]), &old); err != nil || key == "" {
			errs = append(errs, fmt.Errorf("ConfigMap %s/%s is not a direct token registry", cm.Namespace, cm.Name))
			continue
		}
		failed := false
		for _, o := range old {
			if o.ID == "" || !now.Before(o.Expiry.Add(assertion.Skew)) {
				continue
			}
			at := now.UTC()
			if o.RevokedAt != nil {
				at = o.RevokedAt.UTC()
			}
			// Issued at the latest lifetime allows: not counted against
			// the holder's rate of new tokens.
			t := &issued{ID: o.ID, Cluster: key, User: o.User, UID: o.UID, Verbs: o.Verbs, IssuedAt: o.Expiry.Add(-assertion.MaxDirectLifetime),
				Expiry: o.Expiry, RevokedAt: &at, RevokedReason: legacyRevokedReason}
			if err := r.record(ctx, t); err != nil && !apierrors.IsAlreadyExists(err) {
				errs = append(errs, fmt.Errorf("revoking direct token %s of Cluster %s: %w", o.ID, key, err))
				failed = true
				continue
			}
			n++
		}
		if failed {
			continue // the registry stays until every token is recorded revoked
		}
		err := r.cms().Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cm.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting registry %s of an earlier release: %w", cm.Name, err))
		}
		log.FromContext(ctx).Info("revoked the live direct tokens of an earlier release's registry", "cluster", key, "tokens", len(old))
	}
	return n, errors.Join(errs...)
}
