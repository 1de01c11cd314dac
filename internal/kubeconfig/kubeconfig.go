// Package kubeconfig builds the kubeconfig of `fleet kubeconfig`: one that
// reaches a fleet Cluster through the upstream API server's cluster proxy
// (docs/design/cluster-access.md) as the caller's own upstream user.
//
// File references of the caller's kubeconfig (certificate authority, client
// certificate and key, token file, an exec plugin's command given as a path)
// are kept as absolute paths, not inlined: no credential is copied out of its
// file, and a rotated certificate or token keeps working. Such a kubeconfig
// works on the machine it was made on; Options.Flatten inlines the files
// instead (the token file too), for a self-contained one.
package kubeconfig

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gitops-fleet/fleet/internal/tunnel"
)

// ClusterRef names a fleet Cluster: its workspace (namespace) and name.
type ClusterRef struct {
	Workspace, Name string
}

func (r ClusterRef) String() string { return r.Workspace + "/" + r.Name }

// ParseClusterRef parses "<workspace>/<name>".
func ParseClusterRef(s string) (ClusterRef, error) {
	ws, name, ok := strings.Cut(s, "/")
	if !ok || ws == "" || name == "" || strings.Contains(name, "/") {
		return ClusterRef{}, fmt.Errorf("cluster %q: want <workspace>/<name>, for example fleet-default/dev-1", s)
	}
	if errs := validation.IsDNS1123Label(ws); len(errs) > 0 {
		return ClusterRef{}, fmt.Errorf("cluster %q: workspace %q is not a namespace name: %s", s, ws, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return ClusterRef{}, fmt.Errorf("cluster %q: %q is not a Cluster name: %s", s, name, strings.Join(errs, "; "))
	}
	return ClusterRef{Workspace: ws, Name: name}, nil
}

// ProxyPath is the path of Cluster ref's proxy subresource on the upstream
// API server; Kubernetes API paths go after it.
func ProxyPath(ref ClusterRef) string {
	return "/apis/" + tunnel.ProxyGroup + "/" + tunnel.ProxyVersion + "/namespaces/" + url.PathEscape(ref.Workspace) +
		"/clusters/" + url.PathEscape(ref.Name) + "/proxy"
}

// ProxyURL is the server of Cluster ref on the upstream API server at
// server (a kubeconfig cluster's server, which may have a path of its own).
func ProxyURL(server string, ref ClusterRef) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", fmt.Errorf("upstream server %q: %w", server, err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("upstream server %q: want an https:// URL with a host and no query", server)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + ProxyPath(ref)
	u.RawPath = ""
	return u.String(), nil
}

// CheckDirectServer refuses a direct endpoint's URL that kubectl would not
// dial over https (the context carries a bearer token): decided on the URL
// client-go dials (rest.DefaultServerUrlFor), so "host:8443" without a
// scheme, which client-go dials as plain http, is refused like http://.
// The Cluster API requires https:// already; this keeps a token out of a
// plain http context whatever the API server let through.
func CheckDirectServer(server string) error {
	u, _, err := rest.DefaultServerUrlFor(&rest.Config{Host: server})
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("the direct endpoint's url %q is not an https:// URL kubectl would dial over TLS: set spec.agentDirectEndpoint.url to https://<host>:<port>", server)
	}
	return nil
}

// Options say which upstream context to start from and how to name and
// write the result.
type Options struct {
	// Context is the caller's context to use; empty: the current context.
	Context string
	// ContextName names the context, cluster and user of the result;
	// empty: the Cluster's name.
	ContextName string
	// Flatten inlines every file reference (CA, client certificate and
	// key, token file) instead of keeping absolute paths.
	Flatten bool
}

// ForCluster builds the kubeconfig for Cluster ref from the caller's
// kubeconfig upstream (as loaded by clientcmd: merged, LocationOfOrigin
// set): its one cluster is the upstream cluster of the chosen context with
// the server set to the Cluster's proxy URL (CA, insecure, TLS server name,
// proxy URL kept), its one user a copy of the context's user, its one
// context, current, joins them (no namespace: the upstream one means
// nothing downstream).
func ForCluster(upstream *clientcmdapi.Config, ref ClusterRef, opts Options) (*clientcmdapi.Config, error) {
	ctxName := opts.Context
	if ctxName == "" {
		ctxName = upstream.CurrentContext
	}
	if ctxName == "" {
		return nil, errors.New("the kubeconfig has no current context: give --context")
	}
	kctx, ok := upstream.Contexts[ctxName]
	if !ok || kctx == nil {
		return nil, fmt.Errorf("the kubeconfig has no context %q", ctxName)
	}
	cluster, ok := upstream.Clusters[kctx.Cluster]
	if !ok || cluster == nil {
		return nil, fmt.Errorf("context %q: the kubeconfig has no cluster %q", ctxName, kctx.Cluster)
	}
	user, ok := upstream.AuthInfos[kctx.AuthInfo]
	if !ok || user == nil {
		return nil, fmt.Errorf("context %q: the kubeconfig has no user %q", ctxName, kctx.AuthInfo)
	}
	server, err := ProxyURL(cluster.Server, ref)
	if err != nil {
		return nil, fmt.Errorf("context %q: %w", ctxName, err)
	}

	cluster, user = cluster.DeepCopy(), user.DeepCopy()
	cluster.Server = server
	if err := absolute(clientcmd.GetClusterFileReferences(cluster), cluster.LocationOfOrigin); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", kctx.Cluster, err)
	}
	if err := absolute(clientcmd.GetAuthInfoFileReferences(user), user.LocationOfOrigin); err != nil {
		return nil, fmt.Errorf("user %q: %w", kctx.AuthInfo, err)
	}
	if opts.Flatten {
		if err := flatten(cluster, user); err != nil {
			return nil, err
		}
	}
	// Where an entry was read from is not part of the result.
	cluster.LocationOfOrigin, user.LocationOfOrigin = "", ""

	name := opts.ContextName
	if name == "" {
		name = ref.Name
	}
	out := clientcmdapi.NewConfig()
	out.Clusters[name] = cluster
	out.AuthInfos[name] = user
	kctx = clientcmdapi.NewContext()
	kctx.Cluster, kctx.AuthInfo = name, name
	out.Contexts[name] = kctx
	out.CurrentContext = name
	return out, nil
}

// absolute makes relative file references absolute, relative to the
// directory of the kubeconfig file they were read from.
func absolute(refs []*string, origin string) error {
	for _, ref := range refs {
		if *ref == "" || filepath.IsAbs(*ref) {
			continue
		}
		if origin == "" {
			return fmt.Errorf("file %q is relative and where it was read from is unknown", *ref)
		}
		dir, err := filepath.Abs(filepath.Dir(origin))
		if err != nil {
			return err
		}
		*ref = filepath.Join(dir, *ref)
	}
	return nil
}

// flatten inlines the file references (already absolute).
func flatten(cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) error {
	pairs := []struct {
		path *string
		data *[]byte
	}{
		{&cluster.CertificateAuthority, &cluster.CertificateAuthorityData},
		{&user.ClientCertificate, &user.ClientCertificateData},
		{&user.ClientKey, &user.ClientKeyData},
	}
	for _, p := range pairs {
		if *p.path == "" {
			continue
		}
		b, err := os.ReadFile(*p.path)
		if err != nil {
			return fmt.Errorf("inlining: %w", err)
		}
		*p.path, *p.data = "", b
	}
	if user.TokenFile != "" {
		b, err := os.ReadFile(user.TokenFile)
		if err != nil {
			return fmt.Errorf("inlining: %w", err)
		}
		// client-go trims the file's content the same way.
		user.Token, user.TokenFile = strings.TrimSpace(string(b)), ""
	}
	return nil
}
