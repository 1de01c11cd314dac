package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/direct"
)

// The authorized cluster endpoint (docs/cluster-access.md): fleet-proxy
// issues direct tokens (POST .../clusters/<name>/token) to users with
// clusters/proxy on the Cluster, records each in the cluster's registry
// ConfigMap in its own namespace, rechecks the users' rights while their
// tokens live and marks a token revoked once a right it carries is gone;
// agents read the revoked ones (GET .../clusters/<name>/revocations).

// DirectIssuer signs direct tokens.
type DirectIssuer interface {
	IssueDirect(u user.Info, audience string, verbs []string, lifetime time.Duration) (string, assertion.DirectToken, error)
}

// IssueDirect signs a direct token with this replica's key, which stays
// published for at least as long as the token lives.
func (k *SigningKeys) IssueDirect(u user.Info, audience string, verbs []string, lifetime time.Duration) (string, assertion.DirectToken, error) {
	now := k.opts.Now()
	if err := k.checkSignable(now, lifetime); err != nil {
		return "", assertion.DirectToken{}, err
	}
	return k.signer.SignDirect(identityOf(u), audience, verbs, now, lifetime)
}

// ErrNoDirectEndpoint: the Cluster has no spec.agentDirectEndpoint.
var ErrNoDirectEndpoint = errors.New("no direct endpoint")

// AgentAuthorizer says whether the authenticated caller u is the agent of
// Cluster ws/name (the identity mapping of attach); nil when it is.
type AgentAuthorizer interface {
	AuthorizeAgent(ctx context.Context, u user.Info, ws, name string) error
}

const (
	// registryLabel marks the registry ConfigMaps.
	registryLabel = "fleet.cattle.io/direct-tokens"
	// registryClusterAnnotation names the Cluster of a registry.
	registryClusterAnnotation = "fleet.cattle.io/cluster"
	registryKey               = "tokens.json"
	// MaxDirectTokensPerCluster bounds the live tokens of one cluster (the
	// registry is one ConfigMap, at most 1 MiB).
	MaxDirectTokensPerCluster = 2000
)

// RegistryName is the ConfigMap of Cluster key's tokens.
func RegistryName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "fleet-direct-" + hex.EncodeToString(sum[:])[:16]
}

// issued is one token in the registry: who holds it and what it carries,
// never the token itself.
type issued struct {
	ID        string              `json:"id"`
	User      string              `json:"user"`
	UID       string              `json:"uid,omitempty"`
	Groups    []string            `json:"groups,omitempty"`
	Extra     map[string][]string `json:"extra,omitempty"`
	Verbs     []string            `json:"verbs"`
	Expiry    time.Time           `json:"expiry"`
	RevokedAt *time.Time          `json:"revokedAt,omitempty"`
}

func (t issued) userInfo() user.Info {
	return &user.DefaultInfo{Name: t.User, UID: t.UID, Groups: append(slices.Clone(t.Groups), user.AllAuthenticated), Extra: t.Extra}
}

// Registry is where issued direct tokens are recorded, one ConfigMap per
// Cluster in fleet-proxy's namespace, read through an informer.
type Registry struct {
	client    kubernetes.Interface
	namespace string
	lister    corelisters.ConfigMapNamespaceLister
	synced    toolscache.InformerSynced
	factory   informers.SharedInformerFactory
}

// NewRegistry returns the registry in namespace; Start fills its cache.
func NewRegistry(c kubernetes.Interface, namespace string) *Registry {
	f := informers.NewSharedInformerFactoryWithOptions(c, 10*time.Minute, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = registryLabel + "=true" }))
	inf := f.Core().V1().ConfigMaps()
	return &Registry{client: c, namespace: namespace, lister: inf.Lister().ConfigMaps(namespace), synced: inf.Informer().HasSynced, factory: f}
}

// Start starts the informer and waits (up to a minute) for it to fill.
func (r *Registry) Start(ctx context.Context) error {
	r.factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !toolscache.WaitForCacheSync(syncCtx.Done(), r.synced) {
		return errors.New("the cache of direct token registries did not fill")
	}
	return nil
}

func decodeRegistry(cm *corev1.ConfigMap) ([]issued, error) {
	var out []issued
	if s := cm.Data[registryKey]; s != "" {
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
		}
	}
	return out, nil
}

// update applies change to the tokens of key's registry (made when
// missing), retrying on conflicts. change returns false to write nothing.
func (r *Registry) update(ctx context.Context, key string, change func([]issued) ([]issued, bool, error)) error {
	cms := r.client.CoreV1().ConfigMaps(r.namespace)
	name := RegistryName(key)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		create := apierrors.IsNotFound(err)
		if create {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: name,
				Labels:      map[string]string{registryLabel: "true", "app.kubernetes.io/name": "fleet-proxy"},
				Annotations: map[string]string{registryClusterAnnotation: key}}}
		} else if err != nil {
			return err
		}
		tokens, err := decodeRegistry(cm)
		if err != nil {
			return err
		}
		tokens, changed, err := change(tokens)
		if err != nil || !changed {
			return err
		}
		b, err := json.Marshal(tokens)
		if err != nil {
			return err
		}
		cm.Data = map[string]string{registryKey: string(b)}
		if create {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), name, err)
			}
			return err
		}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
}

// record adds a newly issued token, dropping the expired ones.
func (r *Registry) record(ctx context.Context, key string, t issued, now time.Time) error {
	return r.update(ctx, key, func(tokens []issued) ([]issued, bool, error) {
		tokens = live(tokens, now)
		if len(tokens) >= MaxDirectTokensPerCluster {
			return nil, false, errTooManyTokens
		}
		return append(tokens, t), true, nil
	})
}

var errTooManyTokens = fmt.Errorf("the cluster has %d direct tokens that have not expired; ask again once some have", MaxDirectTokensPerCluster)

// live drops the tokens that expired (their revocation no longer matters).
func live(tokens []issued, now time.Time) []issued {
	return slices.DeleteFunc(tokens, func(t issued) bool { return !now.Before(t.Expiry.Add(assertion.Skew)) })
}

// revoked returns the revoked tokens of key from the cache, and a version
// (the ConfigMap's resourceVersion; "" when there is no registry).
func (r *Registry) revoked(key string, now time.Time) ([]direct.Revoked, string, error) {
	cm, err := r.lister.Get(RegistryName(key))
	if apierrors.IsNotFound(err) {
		return []direct.Revoked{}, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	tokens, err := decodeRegistry(cm)
	if err != nil {
		return nil, "", err
	}
	out := []direct.Revoked{}
	for _, t := range live(tokens, now) {
		if t.RevokedAt != nil {
			out = append(out, direct.Revoked{ID: t.ID, Expiry: t.Expiry})
		}
	}
	return out, cm.ResourceVersion, nil
}

// Recheck asks again, for every live token not yet revoked, whether its
// holder still has each verb it carries on the Cluster, and marks it revoked
// when one is gone. Answers come through authz (and its cache); an answer
// that fails revokes nothing. It returns how many tokens it revoked.
func (r *Registry) Recheck(ctx context.Context, authz authorizer.Authorizer, now time.Time) (int, error) {
	cms, err := r.lister.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	total := 0
	var errs []error
	for _, cm := range cms {
		key := cm.Annotations[registryClusterAnnotation]
		ws, name, ok := strings.Cut(key, "/")
		if !ok {
			continue
		}
		tokens, err := decodeRegistry(cm)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var revoke []string
		for _, t := range tokens {
			if t.RevokedAt != nil || !now.Before(t.Expiry.Add(assertion.Skew)) {
				continue
			}
			for _, verb := range t.Verbs {
				d, _, aerr := authz.Authorize(ctx, proxyRight(t.userInfo(), verb, ws, name))
				if aerr == nil && d != authorizer.DecisionAllow {
					revoke = append(revoke, t.ID)
					break
				}
			}
		}
		stillLive := len(live(slices.Clone(tokens), now))
		if stillLive == 0 {
			// Every token expired: the registry goes (a deleted Cluster's
			// too), unless a token was recorded meanwhile.
			err := r.client.CoreV1().ConfigMaps(r.namespace).Delete(ctx, cm.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cm.ResourceVersion}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("registry of %s: %w", key, err))
			}
			continue
		}
		if len(revoke) == 0 && stillLive == len(tokens) {
			continue
		}
		err = r.update(ctx, key, func(tokens []issued) ([]issued, bool, error) {
			tokens = live(tokens, now)
			for i := range tokens {
				if tokens[i].RevokedAt == nil && slices.Contains(revoke, tokens[i].ID) {
					at := now.UTC()
					tokens[i].RevokedAt = &at
				}
			}
			return tokens, true, nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("registry of %s: %w", key, err))
			continue
		}
		for _, id := range revoke {
			log.FromContext(ctx).Info("revoked a direct token: its holder no longer has clusters/proxy on the cluster", "cluster", key, "token", id)
		}
		total += len(revoke)
	}
	return total, errors.Join(errs...)
}

// RunRecheck calls Recheck every interval until ctx ends.
func (r *Registry) RunRecheck(ctx context.Context, authz authorizer.Authorizer, interval time.Duration, revoked func(int)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := r.Recheck(ctx, authz, time.Now())
		if err != nil && ctx.Err() == nil {
			log.FromContext(ctx).Error(err, "rechecking direct tokens")
		}
		if n > 0 && revoked != nil {
			revoked(n)
		}
	}
}

// proxyRight is the right verb on clusters/proxy of Cluster ws/name.
func proxyRight(u user.Info, verb, ws, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User: u, Verb: verb, Namespace: ws, APIGroup: rightGroup, APIVersion: rightVersion,
		Resource: rightResource, Subresource: rightSubresource, Name: name, ResourceRequest: true,
	}
}

// maxTokenRequestBody bounds a token request's body.
const maxTokenRequestBody = 16 << 10

// directToken serves POST .../clusters/<name>/token: a direct token carrying
// the verbs of clusters/proxy the caller holds on the Cluster.
func (s *Server) directToken(w http.ResponseWriter, r *http.Request) {
	ws, name := r.PathValue("ws"), r.PathValue("name")
	if len(validation.IsDNS1123Label(ws)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		writeStatus(w, apierrors.NewNotFound(clustersResource, ws+"/"+name))
		return
	}
	if s.opts.DirectIssuer == nil || s.opts.Registry == nil {
		writeStatus(w, apierrors.NewServiceUnavailable("this fleet-proxy issues no direct tokens"))
		return
	}
	key := ws + "/" + name
	u := userFrom(r.Context())
	var req direct.TokenRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTokenRequestBody+1))
	if err != nil || len(body) > maxTokenRequestBody {
		writeStatus(w, apierrors.NewBadRequest("the token request body is unreadable or larger than 16 KiB"))
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeStatus(w, apierrors.NewBadRequest("the token request is not a "+direct.TokenRequestKind+": "+err.Error()))
			return
		}
	}
	lifetime := time.Duration(req.Spec.ExpirationSeconds) * time.Second
	if lifetime == 0 {
		lifetime = assertion.DefaultDirectLifetime
	}
	if lifetime < time.Minute || lifetime > s.opts.DirectTokenMaxLifetime {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("spec.expirationSeconds %d: a direct token lives between 60 s and %d s (fleet-proxy's --direct-token-max-lifetime)",
			req.Spec.ExpirationSeconds, int64(s.opts.DirectTokenMaxLifetime/time.Second))))
		return
	}
	var verbs []string
	for _, verb := range assertion.DirectVerbs {
		d, _, err := s.authz.Authorize(r.Context(), proxyRight(u, verb, ws, name))
		if err != nil {
			log.FromContext(r.Context()).Error(err, "authorizing a direct token request", "cluster", key, "user", u.GetName())
			writeStatus(w, apierrors.NewInternalError(fmt.Errorf("the authorization check failed: %w", err)))
			return
		}
		if d == authorizer.DecisionAllow {
			verbs = append(verbs, verb)
		}
	}
	if len(verbs) == 0 {
		s.metrics.refused("forbidden")
		writeStatus(w, apierrors.NewForbidden(clustersProxyResource, name, fmt.Errorf(
			"user %q has no verb of %s %s/%s on Cluster %s: a direct token needs that right, as the proxy does (ClusterRole fleet-cluster-proxy)",
			u.GetName(), rightGroup, rightResource, rightSubresource, key)))
		return
	}
	var endpoint direct.Endpoint
	if s.opts.DirectEndpoint != nil {
		if endpoint, err = s.opts.DirectEndpoint(r.Context(), ws, name); err != nil {
			st := apierrors.NewBadRequest(err.Error())
			if errors.Is(err, ErrNoDirectEndpoint) {
				st.ErrStatus.Reason = direct.NoEndpointReason
			}
			writeStatus(w, st)
			return
		}
	}
	raw, tok, err := s.opts.DirectIssuer.IssueDirect(u, key, verbs, lifetime)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("signing the direct token: %w", err)))
		return
	}
	rec := issued{ID: tok.ID, User: tok.User, UID: tok.UID, Groups: tok.Groups, Extra: tok.Extra, Verbs: tok.Verbs, Expiry: tok.Expiry}
	if err := s.opts.Registry.record(r.Context(), key, rec, time.Now()); err != nil {
		if errors.Is(err, errTooManyTokens) {
			writeStatus(w, apierrors.NewTooManyRequests(err.Error(), 60))
			return
		}
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("recording the direct token: %w", err)))
		return
	}
	log.FromContext(r.Context()).Info("issued a direct token", "cluster", key, "user", u.GetName(), "token", tok.ID, "verbs", verbs, "expiry", tok.Expiry)
	s.metrics.directTokens.Inc()
	var resp direct.TokenResponse
	resp.Kind, resp.APIVersion = direct.TokenResponseKind, direct.APIVersion
	resp.Status.Token, resp.Status.ExpirationTimestamp, resp.Status.Verbs = raw, tok.Expiry, tok.Verbs
	resp.Status.Endpoint = endpoint
	writeJSON(w, http.StatusCreated, resp)
}

// revocations serves GET .../clusters/<name>/revocations to that Cluster's
// agent: the revoked direct tokens that have not expired.
func (s *Server) revocations(w http.ResponseWriter, r *http.Request) {
	ws, name := r.PathValue("ws"), r.PathValue("name")
	if s.opts.Registry == nil || s.opts.Agents == nil {
		writeStatus(w, apierrors.NewServiceUnavailable("this fleet-proxy keeps no direct tokens"))
		return
	}
	if err := s.opts.Agents.AuthorizeAgent(r.Context(), userFrom(r.Context()), ws, name); err != nil {
		s.metrics.refused("forbidden")
		writeStatus(w, apierrors.NewForbidden(clustersProxyResource, name, fmt.Errorf("only the agent of Cluster %s/%s reads its revoked direct tokens: %w", ws, name, err)))
		return
	}
	revoked, version, err := s.opts.Registry.revoked(ws+"/"+name, time.Now())
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	etag := `"` + version + `"`
	if version != "" {
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	writeJSON(w, http.StatusOK, direct.Revocations{Kind: direct.RevocationsKind, APIVersion: direct.APIVersion, Revoked: revoked})
}
