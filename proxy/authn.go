package proxy

import (
	"context"
	"fmt"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
)

// The ConfigMap kube-apiserver writes for extension API servers: the
// requestheader CA, the allowed front-proxy names and the header names.
const (
	authConfigMapNamespace = "kube-system"
	authConfigMapName      = "extension-apiserver-authentication"
)

// requestHeaderAuth authenticates the aggregator's requests: it believes the
// X-Remote-* headers only of a connection whose client certificate the
// requestheader CA signed for an allowed name, all read (and kept current)
// from the extension-apiserver-authentication ConfigMap, as kube-apiserver's
// extension servers do. It accepts nothing else: no tokens, no plain client
// certificates, no anonymous requests.
type requestHeaderAuth struct {
	ca      *dynamiccertificates.ConfigMapCAController
	headers *headerrequest.RequestHeaderAuthRequestController
	authenticator.Request
}

func newRequestHeaderAuth(client kubernetes.Interface) (*requestHeaderAuth, error) {
	ca, err := dynamiccertificates.NewDynamicCAFromConfigMapController("requestheader-client-ca",
		authConfigMapNamespace, authConfigMapName, "requestheader-client-ca-file", client)
	if err != nil {
		return nil, err
	}
	headers := headerrequest.NewRequestHeaderAuthRequestController(authConfigMapName, authConfigMapNamespace, client,
		"requestheader-username-headers", "requestheader-uid-headers", "requestheader-group-headers",
		"requestheader-extra-headers-prefix", "requestheader-allowed-names")
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		RequestHeaderConfig: &authenticatorfactory.RequestHeaderConfig{
			UsernameHeaders:     headerrequest.StringSliceProviderFunc(headers.UsernameHeaders),
			UIDHeaders:          headerrequest.StringSliceProviderFunc(headers.UIDHeaders),
			GroupHeaders:        headerrequest.StringSliceProviderFunc(headers.GroupHeaders),
			ExtraHeaderPrefixes: headerrequest.StringSliceProviderFunc(headers.ExtraHeaderPrefixes),
			AllowedClientNames:  headerrequest.StringSliceProviderFunc(headers.AllowedClientNames),
			CAContentProvider:   ca,
		},
	}.New()
	if err != nil {
		return nil, err
	}
	return &requestHeaderAuth{ca: ca, headers: headers, Request: authn}, nil
}

// start loads the ConfigMap once (an error if it cannot) and keeps watching
// it until ctx ends.
func (a *requestHeaderAuth) start(ctx context.Context) error {
	if err := a.ca.RunOnce(ctx); err != nil {
		return fmt.Errorf("reading the requestheader CA from %s/%s: %w", authConfigMapNamespace, authConfigMapName, err)
	}
	if err := a.headers.RunOnce(ctx); err != nil {
		return fmt.Errorf("reading the requestheader settings from %s/%s: %w", authConfigMapNamespace, authConfigMapName, err)
	}
	go a.ca.Run(ctx, 1)
	go a.headers.Run(ctx, 1)
	return nil
}
