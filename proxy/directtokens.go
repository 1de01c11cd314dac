package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/log"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/assertion"
)

// The authorized cluster endpoint (docs/design/cluster-access.md): fleet-proxy
// issues direct tokens (POST .../clusters/<name>/token) to users with
// clusters/proxy on the Cluster, for no longer than the credential they ask
// with, records each (registry.go), rechecks while they live that their
// holders still hold them (the right, the ServiceAccount, the bound pod, the
// per-user quota) and marks a token revoked once one is gone; agents read
// the revoked ones (GET .../clusters/<name>/revocations).

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

// Recheck asks again, for every live token not yet revoked, whether it is
// still held: its holder has each verb it carries on the Cluster (answers
// through authz and its cache), the holder's ServiceAccount and the pod
// its credential was bound to still exist with the UIDs recorded at issue;
// and no holder keeps more than PerUser tokens of a Cluster. It revokes
// the tokens that fail (an answer that fails revokes nothing), deletes the
// records of tokens that expired (once the rate window has passed too) and
// revokes the tokens of an earlier release's registries. It returns how
// many tokens it revoked.
func (r *Registry) Recheck(ctx context.Context, authz authorizer.Authorizer, now time.Time) (int, error) {
	var errs []error
	total, err := r.migrateLegacy(ctx, now)
	if err != nil {
		errs = append(errs, err)
	}
	h := newHolders(r.opts.Metadata)
	held := map[string][]*issued{}
	for _, o := range r.informer.GetStore().List() {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		t, err := decodeRecord(cm)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if t.expired(now) {
			if now.Sub(t.IssuedAt) >= r.opts.IssueWindow {
				err := r.cms().Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cm.ResourceVersion}})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					errs = append(errs, fmt.Errorf("deleting the record of expired direct token %s: %w", t.ID, err))
				}
			}
			continue
		}
		if t.RevokedAt != nil {
			continue
		}
		if reason := r.lost(ctx, authz, h, t); reason != "" {
			ok, err := r.revoke(ctx, t, reason, now)
			if err != nil {
				errs = append(errs, fmt.Errorf("revoking direct token %s of %s: %w", t.ID, t.Cluster, err))
			}
			if ok {
				total++
			}
			continue
		}
		k := t.Cluster + "\x00" + t.User
		held[k] = append(held[k], t)
	}
	for _, ts := range held {
		sortOldestFirst(ts)
		n, err := r.revokeOldest(ctx, ts, now)
		if err != nil {
			errs = append(errs, err)
		}
		total += n
	}
	return total, errors.Join(errs...)
}

// lost says why t's holder no longer holds it ("" while they do, or when
// that cannot be known now).
func (r *Registry) lost(ctx context.Context, authz authorizer.Authorizer, h *holders, t *issued) string {
	ws, name, ok := strings.Cut(t.Cluster, "/")
	if !ok {
		return ""
	}
	if sa := t.ServiceAccount; sa != nil {
		if gone, err := h.gone(ctx, "serviceaccounts", sa); err == nil && gone {
			return fmt.Sprintf("its holder's ServiceAccount %s was deleted (or made again with another UID)", sa)
		}
	}
	if pod := t.Pod; pod != nil {
		if gone, err := h.gone(ctx, "pods", pod); err == nil && gone {
			return fmt.Sprintf("pod %s, which its holder's credential was bound to, is gone", pod)
		}
	}
	for _, verb := range t.Verbs {
		d, _, err := authz.Authorize(ctx, proxyRight(t.userInfo(), verb, ws, name))
		if err == nil && d != authorizer.DecisionAllow {
			return fmt.Sprintf("its holder no longer has %s on %s %s/%s of the Cluster", verb, rightGroup, rightResource, rightSubresource)
		}
	}
	return ""
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

// maxTokenRequestBody bounds a token request's body (it may carry the
// caller's token or certificate).
const maxTokenRequestBody = 64 << 10

// directToken serves POST .../clusters/<name>/token: a direct token carrying
// the verbs of clusters/proxy the caller holds on the Cluster, living no
// longer than the caller's credential, recorded with what it is bound to.
func (s *Server) directToken(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
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
	u := userFrom(ctx)
	var req proxyv1.DirectTokenRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTokenRequestBody+1))
	if err != nil || len(body) > maxTokenRequestBody {
		writeStatus(w, apierrors.NewBadRequest("the token request body is unreadable or larger than 64 KiB"))
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeStatus(w, apierrors.NewBadRequest("the token request is not a "+proxyv1.DirectTokenRequestKind+": "+err.Error()))
			return
		}
	}
	if req.Spec.ExpirationSeconds < 0 || req.Spec.ExpirationSeconds > int64(assertion.MaxDirectLifetime/time.Second) {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("spec.expirationSeconds %d: a direct token lives between 60 s and %d s (fleet-proxy's --direct-token-max-lifetime)",
			req.Spec.ExpirationSeconds, int64(s.opts.DirectTokenMaxLifetime/time.Second))))
		return
	}
	var verbs []string
	for _, verb := range assertion.DirectVerbs {
		d, _, err := s.authz.Authorize(ctx, proxyRight(u, verb, ws, name))
		if err != nil {
			log.FromContext(ctx).Error(err, "authorizing a direct token request", "cluster", key, "user", u.GetName())
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
	var endpoint proxyv1.DirectEndpoint
	if s.opts.DirectEndpoint != nil {
		if endpoint, err = s.opts.DirectEndpoint(ctx, ws, name); err != nil {
			st := apierrors.NewBadRequest(err.Error())
			if errors.Is(err, ErrNoDirectEndpoint) {
				st.ErrStatus.Reason = proxyv1.NoDirectEndpointReason
			}
			writeStatus(w, st)
			return
		}
	}
	// What the token is bound to: the holder's ServiceAccount (by UID) and
	// the pod its credential was bound to; the credential's own expiry.
	sa, pod, err := holderOf(ctx, s.opts.Registry.opts.Metadata, u)
	if err != nil {
		s.metrics.refused("forbidden")
		writeStatus(w, apierrors.NewForbidden(clustersProxyResource, name, fmt.Errorf("no direct token for user %q: %w", u.GetName(), err)))
		return
	}
	credExpiry, unproven, err := credentialExpiry(ctx, s.opts.Client, u, req.Spec.Credential)
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	now := time.Now()
	lifetime, limitedBy, err := directLifetime(time.Duration(req.Spec.ExpirationSeconds)*time.Second,
		s.opts.DirectTokenMaxLifetime, s.opts.DirectTokenUnverifiedMaxLifetime, credExpiry, now)
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("spec.expirationSeconds %d: %v", req.Spec.ExpirationSeconds, err)))
		return
	}

	// One holder's issues are decided one at a time on this replica.
	unlock := s.opts.Registry.lock(key, u.GetName())
	defer unlock()
	if err := s.opts.Registry.admit(key, u.GetName(), now); err != nil {
		var tm *tooMany
		if errors.As(err, &tm) {
			s.metrics.refused("direct-token-limit")
			secs := max(1, int((tm.retryAfter+time.Second-1)/time.Second))
			writeStatus(w, apierrors.NewTooManyRequests(tm.msg, secs))
			return
		}
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	raw, tok, err := s.opts.DirectIssuer.IssueDirect(u, key, verbs, lifetime)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("signing the direct token: %w", err)))
		return
	}
	// IssuedAt to the nanosecond (the token's iat has seconds): the order
	// of a holder's tokens decides which the quota revokes.
	rec := &issued{ID: tok.ID, Cluster: key, User: tok.User, UID: tok.UID, Groups: tok.Groups, Extra: tok.Extra, Verbs: tok.Verbs,
		IssuedAt: time.Now().UTC(), Expiry: tok.Expiry, LimitedBy: limitedBy, ServiceAccount: sa, Pod: pod}
	if err := s.opts.Registry.record(ctx, rec); err != nil {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("recording the direct token: %w", err)))
		return
	}
	if n, err := s.opts.Registry.enforceQuota(ctx, key, u.GetName(), now); err != nil {
		log.FromContext(ctx).Error(err, "revoking the oldest direct tokens of a holder over the quota", "cluster", key, "user", u.GetName())
	} else if n > 0 {
		s.metrics.directRevoked.Add(float64(n))
	}
	log.FromContext(ctx).Info("issued a direct token", "cluster", key, "user", u.GetName(), "token", tok.ID, "verbs", verbs,
		"expiry", tok.Expiry, "limitedBy", limitedBy)
	s.metrics.directTokens.Inc()
	switch limitedBy {
	case proxyv1.LimitedByCredential:
		w.Header().Add("Warning", fmt.Sprintf(`299 - "the direct token expires at %s, with the credential you asked with"`, tok.Expiry.UTC().Format(time.RFC3339)))
	case proxyv1.LimitedByUnverifiedCredential:
		why := "no credential was shown with the request"
		if unproven != "" {
			why = unproven
		}
		w.Header().Add("Warning", fmt.Sprintf(`299 - "the direct token lives %s, the most for a credential whose lifetime is unknown: %s"`,
			lifetime, strings.ReplaceAll(why, `"`, "'")))
	}
	var resp proxyv1.DirectToken
	resp.Kind, resp.APIVersion = proxyv1.DirectTokenKind, proxyv1.APIVersion
	resp.Status.Token, resp.Status.ExpirationTimestamp, resp.Status.Verbs = raw, tok.Expiry, tok.Verbs
	resp.Status.Endpoint, resp.Status.LimitedBy = endpoint, limitedBy
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
	revoked, version := s.opts.Registry.revoked(ws+"/"+name, time.Now())
	etag := `"` + version + `"`
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeJSON(w, http.StatusOK, proxyv1.DirectTokenRevocations{TypeMeta: metav1.TypeMeta{Kind: proxyv1.DirectTokenRevocationsKind, APIVersion: proxyv1.APIVersion}, Revoked: revoked})
}
