package kubeconfig

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
)

// UseEndpoint points context name of out (as ForCluster made it) at
// fleet-proxy's endpoint, when the upstream publishes one (ConfigMap
// kube-public/fleet-proxy-endpoint) and the caller's user can authenticate
// there: with a bearer token (a token, a token file, an exec plugin or an
// auth provider), without impersonation. The upstream path stays in out as
// context <name>-upstream. Nothing is changed, and nothing said, when the
// upstream publishes no endpoint; what else keeps the upstream path is a
// warning. A ConfigMap the caller may not read is no endpoint: the chart
// grants every authenticated user that read when it makes one.
func UseEndpoint(ctx context.Context, cfg *rest.Config, out *clientcmdapi.Config, ref ClusterRef, name string) ([]string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	where := proxyv1.EndpointConfigMapNamespace + "/" + proxyv1.EndpointConfigMap
	cm, err := cs.CoreV1().ConfigMaps(proxyv1.EndpointConfigMapNamespace).Get(ctx, proxyv1.EndpointConfigMap, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		// No endpoint: the chart makes the ConfigMap, and lets every
		// authenticated user read it, only when it has one.
		return nil, nil
	case err != nil:
		return []string{fmt.Sprintf("cannot read where fleet-proxy's endpoint is (ConfigMap %s): %v; context %s goes through the upstream API server", where, err, name)}, nil
	}
	endpoint := strings.TrimSpace(cm.Data[proxyv1.EndpointURLKey])
	ca := cm.Data[proxyv1.EndpointCAKey]
	user, cluster := out.AuthInfos[name], out.Clusters[name]
	var why string
	switch {
	case checkEndpointServer(endpoint) != nil:
		why = fmt.Sprintf("ConfigMap %s's %s %q is not an https:// URL (the chart's proxy.endpoint.url)", where, proxyv1.EndpointURLKey, endpoint)
	case ca == "":
		why = fmt.Sprintf("fleet-proxy has not written the endpoint's CA into ConfigMap %s yet", where)
	case user.Impersonate != "" || user.ImpersonateUID != "" || len(user.ImpersonateGroups) > 0 || len(user.ImpersonateUserExtra) > 0:
		why = "your kubeconfig's user impersonates, which only the upstream API server decides"
	case user.Token == "" && user.TokenFile == "" && user.Exec == nil && user.AuthProvider == nil:
		why = "your kubeconfig's user has no bearer token (a client certificate, or a user name and password), and fleet-proxy's endpoint accepts only tokens"
	}
	if why != "" {
		return []string{fmt.Sprintf("context %s goes through the upstream API server, not fleet-proxy's endpoint: %s", name, why)}, nil
	}
	server, err := ProxyURL(endpoint, ref)
	if err != nil {
		return nil, err
	}
	upstream := name + "-upstream"
	out.Clusters[upstream] = cluster.DeepCopy()
	out.AuthInfos[upstream] = user.DeepCopy()
	out.Contexts[upstream] = &clientcmdapi.Context{Cluster: upstream, AuthInfo: upstream}
	// The endpoint's own TLS: its CA and the host of its URL.
	cluster.Server = server
	cluster.CertificateAuthority, cluster.CertificateAuthorityData = "", []byte(ca)
	cluster.TLSServerName, cluster.InsecureSkipTLSVerify = "", false
	return []string{fmt.Sprintf("context %s reaches Cluster %s through fleet-proxy's endpoint %s, which sees your upstream token; context %s through the upstream API server (--no-proxy-endpoint makes that one the only context)",
		name, ref, endpoint, upstream)}, nil
}

// checkEndpointServer refuses an endpoint URL kubectl would not dial over
// TLS (the context carries the caller's bearer token).
func checkEndpointServer(server string) error {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q is not an https:// URL", server)
	}
	return nil
}
