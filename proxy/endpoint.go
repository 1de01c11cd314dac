package proxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
)

// fleet-proxy's endpoint (docs/design/cluster-access.md, "fleet-proxy's
// endpoint"): the clusters' proxy served on a listener of its own, reached
// without the upstream API server. There is no aggregator to authenticate
// the caller, so fleet-proxy does what kube-apiserver's delegating
// extension servers do: it asks the upstream API server (TokenReview) who a
// bearer token is, and then authorizes exactly as on the aggregated path
// (fleet.cattle.io clusters/proxy by SubjectAccessReview). Nothing else is
// served there: no attach, no direct tokens, no discovery of its own.

// newTokenAuth authenticates bearer tokens (an Authorization header, or a
// WebSocket's bearer protocol) by TokenReview against the upstream API
// server, with its own audiences, as kube-apiserver would: a token it would
// refuse is refused. Answers are kept ttl, by the token's hash. Client
// certificates and anonymous requests are not accepted.
func newTokenAuth(c kubernetes.Interface, ttl time.Duration) (authenticator.Request, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  c.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      webhookRetryBackoff(),
		CacheTTL:                 ttl,
	}.New()
	return authn, err
}

// endpointHandler serves the clusters' proxy paths only, to callers with a
// bearer token the upstream API server accepts, without impersonation.
func (s *Server) endpointHandler() http.Handler {
	mux := http.NewServeMux()
	probes(mux)
	api := http.NewServeMux()
	api.HandleFunc(prefix+"/namespaces/{ws}/clusters/{name}/proxy", s.clusterProxy)
	api.HandleFunc(prefix+"/namespaces/{ws}/clusters/{name}/proxy/{path...}", s.clusterProxy)
	api.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
			Message: fmt.Sprintf("fleet-proxy's endpoint serves only %s/namespaces/<workspace>/clusters/<name>/proxy/...; the rest of %s is served through the upstream API server", prefix, GroupVersion)}})
	})
	mux.Handle("/", s.tokenAuthenticated(api))
	return mux
}

// tokenAuthenticated lets through requests whose bearer token the upstream
// API server accepts, and refuses impersonation: on the aggregated path the
// upstream API server decides it, with its own rights; here nobody would.
func (s *Server) tokenAuthenticated(next http.Handler) http.Handler {
	return s.authenticatedBy(s.tokenAuthn, "fleet-proxy's endpoint accepts only a bearer token the upstream API server accepts (a ServiceAccount token, or what its OIDC or webhook authenticator accepts); a client certificate works only through the upstream API server: `fleet kubeconfig --no-proxy-endpoint`",
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k := range r.Header {
				if strings.HasPrefix(strings.ToLower(k), "impersonate-") {
					s.metrics.refused("impersonation")
					writeStatus(w, apierrors.NewForbidden(clustersProxyResource, "", fmt.Errorf(
						"fleet-proxy's endpoint does not impersonate (%s): go through the upstream API server, which decides who may impersonate whom: `fleet kubeconfig --no-proxy-endpoint`", k)))
					return
				}
			}
			// The same identity as through the upstream API server: its
			// aggregator forwards a UID only when it is configured to
			// (requestheader-uid-headers); without it, so does the
			// endpoint, or a user's downstream identity would differ by
			// path (and the agent would rewrite the user's impersonator on
			// every switch between them).
			if u := userFrom(r.Context()); u.GetUID() != "" && len(s.authn.headers.UIDHeaders()) == 0 {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, &user.DefaultInfo{
					Name: u.GetName(), Groups: u.GetGroups(), Extra: u.GetExtra()}))
			}
			next.ServeHTTP(w, r)
		}))
}

// EndpointTLSConfig is the endpoint listener's TLS configuration: no client
// certificate is asked for (only bearer tokens authenticate there).
func EndpointTLSConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// PublishEndpointCA writes the CA that verifies the endpoint's serving
// certificate into ConfigMap kube-public/fleet-proxy-endpoint, which the
// chart makes with the endpoint's URL. The ConfigMap is left alone when its
// CA is already that one, and a missing ConfigMap is an error that says
// what to install.
func PublishEndpointCA(ctx context.Context, c kubernetes.Interface, ca []byte) error {
	cms := c.CoreV1().ConfigMaps(proxyv1.EndpointConfigMapNamespace)
	cm, err := cms.Get(ctx, proxyv1.EndpointConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("ConfigMap %s/%s is missing: the chart makes it when proxy.endpoint.enabled is true (with proxy.endpoint.url); without it `fleet kubeconfig` cannot find the endpoint",
			proxyv1.EndpointConfigMapNamespace, proxyv1.EndpointConfigMap)
	}
	if err != nil {
		return fmt.Errorf("reading ConfigMap %s/%s: %w", proxyv1.EndpointConfigMapNamespace, proxyv1.EndpointConfigMap, err)
	}
	if cm.Data[proxyv1.EndpointCAKey] == string(ca) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"data": map[string]string{proxyv1.EndpointCAKey: string(ca)}})
	if err != nil {
		return err
	}
	if _, err := cms.Patch(ctx, proxyv1.EndpointConfigMap, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "fleet-proxy"}); err != nil {
		return fmt.Errorf("writing the endpoint's CA into ConfigMap %s/%s: %w", proxyv1.EndpointConfigMapNamespace, proxyv1.EndpointConfigMap, err)
	}
	return nil
}
