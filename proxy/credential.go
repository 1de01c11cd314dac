package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/assertion"
)

// A direct token never outlives the credential that asked for it
// (docs/operations.md, "Direct access"): its lifetime is capped by the
// caller's own credential when the request shows it (the bearer token,
// reviewed; or the client certificate, matched to the request's credential
// id), by DirectTokenUnverifiedMaxLifetime otherwise; a ServiceAccount
// holder is recorded by UID and the pod its token was bound to, so that
// the token is revoked once either is gone.

// DefaultDirectUnverifiedLifetime caps a direct token whose caller's
// credential lifetime is unknown.
const DefaultDirectUnverifiedLifetime = 15 * time.Minute

// Extra keys of bound ServiceAccount tokens (k8s.io/apiserver
// pkg/authentication/serviceaccount).
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// credentialExpiry returns when the credential the request was made with
// expires, as c shows it (zero: unknown), and, when c is given but proves
// nothing, why (for the caller). A malformed c is an error.
func credentialExpiry(ctx context.Context, cs kubernetes.Interface, u user.Info, c *proxyv1.Credential) (time.Time, string, error) {
	if c == nil || (c.Token == "" && c.ClientCertificate == "") {
		return time.Time{}, "", nil
	}
	credID := ""
	if ids := u.GetExtra()[user.CredentialIDKey]; len(ids) == 1 {
		credID = ids[0]
	}
	if c.ClientCertificate != "" {
		blk, _ := pem.Decode([]byte(c.ClientCertificate))
		if blk == nil || blk.Type != "CERTIFICATE" {
			return time.Time{}, "", errors.New("spec.credential.clientCertificate is not a PEM certificate")
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return time.Time{}, "", fmt.Errorf("spec.credential.clientCertificate: %w", err)
		}
		// The API server names the certificate it authenticated the
		// request with by its SHA-256: this one, or no proof.
		sum := sha256.Sum256(blk.Bytes)
		if credID == "X509SHA256="+hex.EncodeToString(sum[:]) {
			return cert.NotAfter, "", nil
		}
		if c.Token == "" {
			return time.Time{}, "the client certificate sent is not the one the request was made with", nil
		}
	}
	if len(c.Token) > 64<<10 {
		return time.Time{}, "", errors.New("spec.credential.token is larger than 64 KiB")
	}
	// The API server says whose token it is (and that it is valid now).
	rev, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: c.Token}}, metav1.CreateOptions{})
	switch {
	case err != nil:
		return time.Time{}, "the API server could not review the token sent: " + err.Error(), nil
	case !rev.Status.Authenticated:
		return time.Time{}, "the API server does not authenticate the token sent", nil
	case rev.Status.User.Username != u.GetName() || (u.GetUID() != "" && rev.Status.User.UID != u.GetUID()):
		return time.Time{}, fmt.Sprintf("the token sent authenticates as %q, not as the request's user (kubectl --as?)", rev.Status.User.Username), nil
	case credID != "" && !tokenCredentialIs(rev.Status.User.Extra, credID):
		return time.Time{}, "the token sent is not the credential the request was made with", nil
	}
	if exp := jwtExpiry(c.Token); !exp.IsZero() {
		return exp, "", nil
	}
	return time.Time{}, "the token sent has no expiry", nil
}

func tokenCredentialIs(extra map[string]authnv1.ExtraValue, id string) bool {
	v := extra[user.CredentialIDKey]
	return len(v) == 1 && v[0] == id
}

// jwtExpiry is the exp claim of a JWT (zero when tok is not one or has
// none). The signature is not checked here: the TokenReview did.
func jwtExpiry(tok string) time.Time {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}
	}
	var c struct {
		Exp json.Number `json:"exp"`
	}
	if json.Unmarshal(b, &c) != nil {
		return time.Time{}
	}
	sec, err := c.Exp.Float64()
	if err != nil || sec <= 0 {
		return time.Time{}
	}
	return time.Unix(int64(sec), 0)
}

// directLifetime decides a direct token's lifetime: asked (zero: the
// default) within a minute and maxLife, and, lest it outlive the caller's
// credential, no longer than that credential's remaining life less the
// agents' clock skew (credExpiry; zero: unknown, then unverifiedMax). It
// returns the lifetime, why it is less than asked (a proxyv1.LimitedBy*
// value, "" when it is not), or a refusal saying what to fix.
func directLifetime(asked, maxLife, unverifiedMax time.Duration, credExpiry, now time.Time) (time.Duration, string, error) {
	if asked == 0 {
		asked = assertion.DefaultDirectLifetime
	}
	if asked < time.Minute || asked > maxLife {
		return 0, "", fmt.Errorf("a direct token lives between 60 s and %d s (fleet-proxy's --direct-token-max-lifetime)", int64(maxLife/time.Second))
	}
	limit, why := unverifiedMax, proxyv1.LimitedByUnverifiedCredential
	if !credExpiry.IsZero() {
		limit, why = credExpiry.Sub(now)-assertion.Skew, proxyv1.LimitedByCredential
	}
	if asked <= limit {
		return asked, "", nil
	}
	if limit < time.Minute {
		return 0, "", fmt.Errorf("your credential expires at %s, in less than a minute: renew it (log in again) and ask again", credExpiry.UTC().Format(time.RFC3339))
	}
	return limit.Truncate(time.Second), why, nil
}

// holderOf returns, for a ServiceAccount user, its ServiceAccount (by the
// user's UID, or read when the API server gave none) and the pod its
// token was bound to; nil for other users. An error refuses the token.
func holderOf(ctx context.Context, md metadata.Interface, u user.Info) (sa, pod *boundObject, err error) {
	ns, name, err := serviceaccount.SplitUsername(u.GetName())
	if err != nil {
		return nil, nil, nil // not a ServiceAccount
	}
	obj, err := md.Resource(corev1.SchemeGroupVersion.WithResource("serviceaccounts")).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil, fmt.Errorf("ServiceAccount %s/%s no longer exists", ns, name)
	case err != nil:
		return nil, nil, fmt.Errorf("reading ServiceAccount %s/%s: %w", ns, name, err)
	case u.GetUID() != "" && string(obj.UID) != u.GetUID():
		return nil, nil, fmt.Errorf("ServiceAccount %s/%s was made again since the request's credential was issued", ns, name)
	}
	sa = &boundObject{Namespace: ns, Name: name, UID: string(obj.UID)}
	extra := u.GetExtra()
	if pn, pu := extra[extraPodName], extra[extraPodUID]; len(pn) == 1 && len(pu) == 1 && pn[0] != "" && pu[0] != "" {
		pod = &boundObject{Namespace: ns, Name: pn[0], UID: pu[0]}
	}
	return sa, pod, nil
}

// holders looks up, once per recheck, whether the objects tokens are
// bound to still exist with their UIDs (metadata only).
type holders struct {
	md   metadata.Interface
	seen map[string]holderAnswer
}

type holderAnswer struct {
	gone bool // not found, or another UID
	err  error
}

func newHolders(md metadata.Interface) *holders {
	return &holders{md: md, seen: map[string]holderAnswer{}}
}

// gone reports whether b (a resource of the core group) is gone or made
// again; an error when that cannot be known now.
func (h *holders) gone(ctx context.Context, resource string, b *boundObject) (bool, error) {
	k := resource + "/" + b.Namespace + "/" + b.Name + "/" + b.UID
	if a, ok := h.seen[k]; ok {
		return a.gone, a.err
	}
	var a holderAnswer
	obj, err := h.md.Resource(corev1.SchemeGroupVersion.WithResource(resource)).Namespace(b.Namespace).Get(ctx, b.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		a.gone = true
	case err != nil:
		a.err = err
	default:
		a.gone = string(obj.UID) != b.UID
	}
	h.seen[k] = a
	return a.gone, a.err
}
