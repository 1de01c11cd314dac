package access

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/headers"
)

// The authorized cluster endpoint (docs/design/cluster-access.md): users present a
// direct token fleet-proxy issued them for this cluster; the agent verifies
// it offline (the signing keys it holds, expiry, audience, the revocation
// list it keeps in step with fleet-proxy) and serves the request through the
// same per-user impersonator as requests through the tunnel. Or, as the
// downstream API server's token webhook, it answers TokenReviews with the
// same downstream identity.

// Revocations is the set of revoked direct tokens the agent knows, by jti,
// each until its expiry. Safe for concurrent use.
type Revocations struct {
	mu      sync.RWMutex
	revoked map[string]time.Time
}

// NewRevocations returns an empty set.
func NewRevocations() *Revocations { return &Revocations{revoked: map[string]time.Time{}} }

// Set replaces the set with list (the upstream's list is complete). A
// token once revoked stays revoked until it expires, even when a later
// list (an older fleet-proxy cache) omits it.
func (r *Revocations) Set(list []proxyv1.RevokedToken, now time.Time) (changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, exp := range r.revoked {
		if !now.Before(exp.Add(assertion.Skew)) {
			delete(r.revoked, id)
			changed = true
		}
	}
	for _, e := range list {
		if _, ok := r.revoked[e.ID]; !ok && now.Before(e.Expiry.Add(assertion.Skew)) {
			r.revoked[e.ID] = e.Expiry
			changed = true
		}
	}
	return changed
}

// Revoked reports whether jti is revoked.
func (r *Revocations) Revoked(jti string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.revoked[jti]
	return ok
}

// List returns the set, sorted by jti.
func (r *Revocations) List() []proxyv1.RevokedToken {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]proxyv1.RevokedToken, 0, len(r.revoked))
	for id, exp := range r.revoked {
		out = append(out, proxyv1.RevokedToken{ID: id, Expiry: exp})
	}
	slices.SortFunc(out, func(a, b proxyv1.RevokedToken) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Len is the number of revoked tokens.
func (r *Revocations) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.revoked)
}

// errRevoked refuses a revoked token.
var errRevoked = fmt.Errorf("%w: revoked", assertion.ErrInvalid)

// verifyDirect checks a direct token (refreshing the keys once on an
// unknown kid) and the revocation list.
func (h *Handler) verifyDirect(ctx context.Context, token string, rev *Revocations) (assertion.DirectToken, error) {
	verify := func() (assertion.DirectToken, error) {
		return h.opts.Verifier.VerifyDirect(token, h.opts.Audience, h.opts.Now())
	}
	t, err := verify()
	if errors.Is(err, assertion.ErrUnknownKey) && h.refreshOnUnknownKey(ctx) {
		t, err = verify()
	}
	if err != nil {
		return t, err
	}
	if rev.Revoked(t.ID) {
		return assertion.DirectToken{}, errRevoked
	}
	return t, nil
}

// bearer returns the bearer token of a request.
func bearer(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// ServeDirect returns the direct endpoint's handler (mode agent): the
// Kubernetes API of this cluster for holders of a direct token, as their
// impersonator, limited to the verbs the token carries.
func (h *Handler) ServeDirect(rev *Revocations) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := headers.Impersonation(r.Header); ok {
			writeStatus(w, r, apierrors.NewBadRequest(fmt.Sprintf(
				"impersonation headers (%s) are not accepted by the direct endpoint: it serves the identity of its token", name)))
			return
		}
		tok, err := h.verifyDirect(r.Context(), bearer(r), rev)
		if err != nil {
			h.opts.Log.V(1).Info("refused a direct request", "reason", err.Error(), "path", r.URL.Path)
			h.imp.metrics.directRefused.Inc()
			writeStatus(w, r, apierrors.NewUnauthorized("no valid direct token for this cluster: get one with `fleet kubeconfig` (it may have expired or been revoked)"))
			return
		}
		// exec, attach and port-forward (any upgrade) need create, as
		// through fleet-proxy: a WebSocket exec is a GET.
		verb, ok := assertion.RequestVerb(r.Method, r.Header, r.URL.Path)
		if !ok {
			writeStatus(w, r, apierrors.NewMethodNotSupported(clustersProxy, r.Method))
			return
		}
		if !tok.Allows(verb) {
			h.imp.metrics.directRefused.Inc()
			why := "the user holds only those on this Cluster upstream"
			if verb == "create" && r.Method != http.MethodPost {
				why = "exec, attach and port-forward need create, whatever the method; " + why
			}
			writeStatus(w, r, apierrors.NewForbidden(clustersProxy, "", fmt.Errorf(
				"the direct token of %q carries the verbs %v of clusters/proxy, not %s: %s", tok.User, tok.Verbs, verb, why)))
			return
		}
		h.imp.metrics.directRequests.Inc()
		h.serveAs(w, r, tok.Identity)
	})
}

// serveAs forwards r to the local API server as id's impersonator.
func (h *Handler) serveAs(w http.ResponseWriter, r *http.Request, id assertion.Identity) {
	d := DownstreamFor(id)
	token, err := h.imp.token(r.Context(), id.User, d)
	if err != nil {
		h.opts.Log.Error(err, "preparing the impersonator", "user", id.User)
		writeStatus(w, r, apierrors.NewServiceUnavailable("the agent could not prepare the impersonating account for this user"))
		return
	}
	out := r.Clone(withCredentials(r.Context(), &creds{token: token, id: d, rejected: func() { h.imp.invalidate(id.User, token) }}))
	headers.Clean(out.Header, httpstream.IsUpgradeRequest(r))
	h.proxy.ServeHTTP(w, out)
}

// maxTokenReview bounds a TokenReview's body.
const maxTokenReview = 64 << 10

// ServeTokenReview returns the token webhook (mode webhook): the downstream
// API server posts a TokenReview of a bearer token it does not know; a
// valid direct token for this cluster that carries every verb of
// clusters/proxy authenticates as its downstream identity (fleet:<user>,
// fleet:<groups>, its uid and allow-listed extras). A token limited to some
// verbs is refused: the API server cannot be told to limit them.
//
// A direct token is for the API server itself: the review's spec.audiences
// must be empty (the API server's) or name one of Options.APIAudiences
// (the API server sends them with every request it authenticates); a review
// for any other audience (a service that authenticates its clients with
// TokenReview, such as Vault's Kubernetes auth) is not authenticated.
func (h *Handler) ServeTokenReview(rev *Revocations) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeStatus(w, r, apierrors.NewMethodNotSupported(clustersProxy, r.Method))
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxTokenReview+1))
		if err != nil || len(body) > maxTokenReview {
			writeStatus(w, r, apierrors.NewBadRequest("unreadable TokenReview"))
			return
		}
		var review authnv1.TokenReview
		if err := json.Unmarshal(body, &review); err != nil {
			writeStatus(w, r, apierrors.NewBadRequest("not a TokenReview: "+err.Error()))
			return
		}
		out := authnv1.TokenReview{TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"}}
		if review.APIVersion != "" {
			out.APIVersion = review.APIVersion
		}
		tok, err := h.verifyDirect(r.Context(), review.Spec.Token, rev)
		auds := intersect(review.Spec.Audiences, h.opts.APIAudiences)
		switch {
		case err == nil && len(review.Spec.Audiences) > 0 && len(auds) == 0:
			// A valid token, asked about for another service: say nothing
			// about it but that it is not for that audience.
			h.opts.Log.V(1).Info("token webhook: a direct token reviewed for another audience", "audiences", review.Spec.Audiences)
			out.Status.Error = fmt.Sprintf("direct tokens are for this cluster's API server (audiences %v), not %v", h.opts.APIAudiences, review.Spec.Audiences)
		case err != nil:
			// Not ours (another authenticator's token) or refused: say
			// nothing more than "not authenticated".
			h.opts.Log.V(1).Info("token webhook: not a valid direct token", "reason", err.Error())
			out.Status.Error = "not a valid direct token for this cluster"
		case len(tok.Verbs) != len(assertion.DirectVerbs):
			out.Status.Error = fmt.Sprintf("the direct token carries only %v of clusters/proxy; the API server's token webhook accepts only tokens with every verb (use the agent's direct endpoint)", tok.Verbs)
		default:
			d := DownstreamFor(tok.Identity)
			out.Status.Authenticated = true
			out.Status.User = authnv1.UserInfo{Username: d.User, UID: d.UID, Groups: d.Groups}
			if len(d.Extra) > 0 {
				out.Status.User.Extra = map[string]authnv1.ExtraValue{}
				for k, v := range d.Extra {
					out.Status.User.Extra[k] = v
				}
			}
			out.Status.Audiences = auds
			h.imp.metrics.directRequests.Inc()
		}
		if !out.Status.Authenticated {
			h.imp.metrics.directRefused.Inc()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&out)
	})
}

// clustersProxy names what a refusal is about.
var clustersProxy = schema.GroupResource{Group: "fleet.cattle.io", Resource: "clusters/proxy"}

// intersect returns the audiences of asked that are in known, in asked's
// order (nil when asked is empty).
func intersect(asked, known []string) []string {
	var out []string
	for _, a := range asked {
		if slices.Contains(known, a) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// DiscoverAPIAudiences returns the audiences of the local API server (its
// --api-audiences, by default its service account issuer): the audiences of
// a token it issues without being asked for any, here one of
// ServiceAccount namespace/name, which is thrown away.
func DiscoverAPIAudiences(ctx context.Context, cs kubernetes.Interface, namespace, name string) ([]string, error) {
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("asking the API server for a token of ServiceAccount %s/%s (to learn its audiences): %w", namespace, name, err)
	}
	// The API server fills spec.audiences with its own when none is asked;
	// the token's aud says the same.
	if len(tr.Spec.Audiences) > 0 {
		return tr.Spec.Audiences, nil
	}
	parts := strings.Split(tr.Status.Token, ".")
	if len(parts) != 3 {
		return nil, errors.New("the API server's token is not a JWT: cannot learn its audiences; set them (direct.apiAudiences)")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("the API server's token: %w", err)
	}
	var c struct {
		Aud jwt.Audience `json:"aud"`
	}
	if err := json.Unmarshal(b, &c); err != nil || len(c.Aud) == 0 {
		return nil, errors.New("the API server's token names no audience: set them (direct.apiAudiences)")
	}
	return c.Aud, nil
}
