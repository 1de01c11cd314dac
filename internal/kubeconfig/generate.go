package kubeconfig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/certhost"
	"github.com/gitops-fleet/fleet/internal/direct"
)

// Request is what `fleet kubeconfig` is asked for.
type Request struct {
	// Kubeconfig is the caller's kubeconfig file; empty: $KUBECONFIG (a
	// list of files, merged), then ~/.kube/config, as kubectl reads them.
	Kubeconfig string
	Cluster    ClusterRef
	Options
	// DirectTokenTTL is the lifetime asked for the direct context's token
	// (zero: one hour). NoDirect writes no direct context.
	DirectTokenTTL time.Duration
	NoDirect       bool
	// NoProxyEndpoint keeps the context on the upstream API server's path
	// even when fleet-proxy has an endpoint of its own (UseEndpoint).
	NoProxyEndpoint bool
}

// Generate reads the caller's kubeconfig, builds the kubeconfig for the
// Cluster (ForCluster) and checks it as the caller upstream (Check). It
// returns the kubeconfig's YAML and what the caller should be warned of; a
// Cluster that does not exist is an error.
func Generate(ctx context.Context, req Request) ([]byte, []string, error) {
	upstream, err := LoadUpstream(req.Kubeconfig, req.Context)
	if err != nil {
		return nil, nil, err
	}
	opts := req.Options
	opts.Context = upstream.Context
	out, err := ForCluster(upstream.Raw, req.Cluster, opts)
	if err != nil {
		return nil, nil, err
	}
	cfg := upstream.REST
	warnings, err := Check(ctx, cfg, req.Cluster)
	if err != nil {
		return nil, nil, upstream.explainCheck(err)
	}
	name := req.ContextName
	if name == "" {
		name = req.Cluster.Name
	}
	if !req.NoProxyEndpoint {
		w, err := UseEndpoint(ctx, cfg, out, req.Cluster, name)
		if err != nil {
			return nil, nil, err
		}
		warnings = append(warnings, w...)
	}
	if !req.NoDirect {
		w, err := AddDirect(ctx, cfg, out, req.Cluster, name+"-direct", req.DirectTokenTTL)
		if err != nil {
			return nil, nil, err
		}
		warnings = append(warnings, w...)
	}
	data, err := clientcmd.Write(*out)
	if err != nil {
		return nil, nil, err
	}
	return data, warnings, nil
}

// Check asks the upstream API server, as the caller (cfg), whether Cluster
// ref exists and whether the caller may use its proxy. A Cluster that does
// not exist is an error; a Cluster the caller may not read, or a proxy the
// caller may not use, is a warning: rights can come later, and the
// kubeconfig is still right.
func Check(ctx context.Context, cfg *rest.Config, ref ClusterRef) ([]string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var warnings []string
	err = cs.CoreV1().RESTClient().Get().
		AbsPath("/apis", fleet.GroupVersion.Group, fleet.GroupVersion.Version, "namespaces", ref.Workspace, "clusters", ref.Name).
		Do(ctx).Error()
	var status apierrors.APIStatus
	switch {
	case err == nil:
	case apierrors.IsNotFound(err) && errors.As(err, &status) && status.Status().Details != nil && status.Status().Details.Name == ref.Name:
		return nil, fmt.Errorf("no Cluster %q in workspace %q on %s (Cluster %s not found)", ref.Name, ref.Workspace, cfg.Host, ref)
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading Cluster %s: %s does not serve fleet.cattle.io Clusters: is your kubeconfig's context the fleet upstream (management) cluster? (%w)", ref, cfg.Host, err)
	case apierrors.IsForbidden(err):
		warnings = append(warnings, fmt.Sprintf("you may not read Cluster %q in workspace %q, so whether it exists is not checked", ref.Name, ref.Workspace))
	default:
		return nil, &requestError{what: "Cluster " + ref.String(), err: err}
	}

	review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ref.Workspace, Verb: "get", Group: fleet.GroupVersion.Group,
			Resource: "clusters", Subresource: "proxy", Name: ref.Name,
		}},
	}, metav1.CreateOptions{})
	switch {
	case err != nil:
		warnings = append(warnings, fmt.Sprintf("cannot check whether you may use Cluster %s through the proxy: %v", ref, err))
	case !review.Status.Allowed:
		warnings = append(warnings, fmt.Sprintf("you may not get clusters/proxy (fleet.cattle.io) on Cluster %q in workspace %q: requests with this kubeconfig get 403 until that right is bound to you upstream (ClusterRole fleet-cluster-proxy, or a Role with resourceNames [%s])",
			ref.Name, ref.Workspace, ref.Name))
	}
	return warnings, nil
}

// AddDirect adds to out the context name (and its cluster and user of the
// same name) that reaches Cluster ref's direct endpoint, when the Cluster
// has one (spec.agentDirectEndpoint): fleet-proxy issues the caller (cfg) a
// direct token for ttl and says where the endpoint is and its CA. Nothing is
// added, and nothing said, for a Cluster without a direct endpoint or a
// caller who may not use its proxy (Check warns of that); what else stops it
// is a warning: the proxy context is written anyway.
func AddDirect(ctx context.Context, cfg *rest.Config, out *clientcmdapi.Config, ref ClusterRef, name string, ttl time.Duration) ([]string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ref.Workspace, Verb: "get", Group: fleet.GroupVersion.Group,
			Resource: "clusters", Subresource: "proxy", Name: ref.Name,
		}},
	}, metav1.CreateOptions{})
	if err == nil && !review.Status.Allowed {
		return nil, nil
	}
	tok, err := direct.RequestToken(ctx, cfg, ref.Workspace, ref.Name, ttl)
	switch {
	case apierrors.ReasonForError(err) == proxyv1.NoDirectEndpointReason:
		return nil, nil
	case err != nil:
		return []string{fmt.Sprintf("no direct token for Cluster %s, so no context %s: %v", ref, name, err)}, nil
	}
	if err := CheckDirectServer(tok.Status.Endpoint.URL); err != nil {
		return []string{fmt.Sprintf("no context %s for Cluster %s: %v", name, ref, err)}, nil
	}
	out.Clusters[name] = &clientcmdapi.Cluster{Server: tok.Status.Endpoint.URL, CertificateAuthorityData: []byte(tok.Status.Endpoint.CABundle)}
	out.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	out.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	var warnings []string
	var mismatch *certhost.Mismatch
	if names := tok.Status.Endpoint.CertificateNames; len(names) > 0 && errors.As(certhost.Check(names, tok.Status.Endpoint.URL), &mismatch) {
		warnings = append(warnings, fmt.Sprintf("context %s will fail TLS (an x509 error at kubectl): the direct endpoint's serving certificate does not cover host %q of its url %s (%v). "+
			"The cluster's operator must fix the certificate or spec.agentDirectEndpoint.url (condition DirectEndpoint of Cluster %s says how); the proxy context works meanwhile",
			name, mismatch.Host, tok.Status.Endpoint.URL, mismatch, ref))
	}
	if len(tok.Status.Verbs) < len(assertion.DirectVerbs) {
		warnings = append(warnings, fmt.Sprintf("the direct token carries only the verbs %v (those you hold on clusters/proxy of Cluster %s)", tok.Status.Verbs, ref))
	}
	switch tok.Status.LimitedBy {
	case proxyv1.LimitedByCredential:
		warnings = append(warnings, "the direct token expires with the credential you asked with (a direct token never outlives it)")
	case proxyv1.LimitedByUnverifiedCredential:
		warnings = append(warnings, "fleet-proxy could not learn when your credential expires (a client certificate from an exec plugin, a token without an expiry, kubectl --as), so the direct token lives only as long as it allows for such credentials")
	}
	warnings = append(warnings, fmt.Sprintf("context %s reaches Cluster %s directly until %s (its token is a credential: keep the kubeconfig secret; run this again for a new one)",
		name, ref, tok.Status.ExpirationTimestamp.Local().Format(time.RFC3339)))
	return warnings, nil
}

// WriteFile writes a kubeconfig to path with mode 0600, replacing the file
// whole (never a half-written or more widely readable kubeconfig).
func WriteFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
