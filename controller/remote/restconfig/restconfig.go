// Package restconfig makes the REST config of a downstream cluster from
// its kubeconfig Secret, refusing a kubeconfig that would make the
// controller use more than the credentials it carries.
package restconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
)

// A kubeconfig Secret is written by whoever may commit a Cluster, and the
// controller acts with it from inside its own pod. So a kubeconfig may only
// carry credentials, never point the controller at something of its own: a
// file (its ServiceAccount token is one), a program to run, a credential
// plugin, a proxy, or a TLS check switched off. Each of those is refused
// unless the controller configuration opts in (insecureKubeconfig), as Flux's
// kustomize-controller does with --insecure-kubeconfig-exec and -tls.

// RequestTimeout bounds every request to a downstream cluster.
const RequestTimeout = 15 * time.Second

// Error is a kubeconfig the controller does not use: one that does not
// parse or names no server (Reason KubeConfigInvalid), or one the policy
// refuses (KubeConfigUnsafe, Err an *UnsafeError). It will not go away by
// retrying.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// UnsafeError names the first kubeconfig field that would make the
// controller use more than the credentials in the kubeconfig.
type UnsafeError struct {
	// Field is where it is, as in the kubeconfig: users["admin"].tokenFile.
	Field string
	// Why says what it would make the controller do.
	Why string
	// OptIn is the controller configuration switch that allows it ("" if
	// nothing does).
	OptIn string
	// Fix says what to write instead (default: put the credential itself
	// in the kubeconfig).
	Fix string
}

func (e *UnsafeError) Error() string {
	msg := fmt.Sprintf("the kubeconfig sets %s, which %s", e.Field, e.Why)
	if e.OptIn != "" {
		fix := e.Fix
		if fix == "" {
			fix = "put the credential itself in the kubeconfig"
		}
		return msg + fmt.Sprintf("; %s, or allow this with %s in the controller configuration", fix, e.OptIn)
	}
	return msg
}

// CheckKubeconfig refuses a kubeconfig that uses any feature the policy does
// not allow. It looks at every cluster and user in the file, not only the
// current context's: a kubeconfig should hold the one cluster it is for.
func CheckKubeconfig(cfg *clientcmdapi.Config, allow config.InsecureKubeconfig) error {
	for _, name := range slices.Sorted(maps.Keys(cfg.AuthInfos)) {
		if err := checkUser(name, cfg.AuthInfos[name], allow); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Clusters)) {
		if err := checkCluster(name, cfg.Clusters[name], allow); err != nil {
			return err
		}
	}
	return nil
}

func checkUser(name string, u *clientcmdapi.AuthInfo, allow config.InsecureKubeconfig) error {
	if u == nil {
		return nil
	}
	field := func(f string) string { return fmt.Sprintf("users[%q].%s", name, f) }
	const readsFile = "makes the controller read a file of its own pod (its ServiceAccount token is one)"
	switch {
	case u.Exec != nil && !allow.Exec:
		return &UnsafeError{Field: field("exec"), Why: "runs a program inside the controller's pod", OptIn: "insecureKubeconfig.exec"}
	case u.AuthProvider != nil && !allow.Exec:
		return &UnsafeError{Field: field("auth-provider"), Why: "runs a credential plugin inside the controller", OptIn: "insecureKubeconfig.exec"}
	case u.TokenFile != "" && !allow.Files:
		return &UnsafeError{Field: field("tokenFile"), Why: readsFile, OptIn: "insecureKubeconfig.files"}
	case u.ClientCertificate != "" && !allow.Files:
		return &UnsafeError{Field: field("client-certificate"), Why: readsFile + "; use client-certificate-data", OptIn: "insecureKubeconfig.files"}
	case u.ClientKey != "" && !allow.Files:
		return &UnsafeError{Field: field("client-key"), Why: readsFile + "; use client-key-data", OptIn: "insecureKubeconfig.files"}
	}
	return nil
}

func checkCluster(name string, c *clientcmdapi.Cluster, allow config.InsecureKubeconfig) error {
	if c == nil {
		return nil
	}
	field := func(f string) string { return fmt.Sprintf("clusters[%q].%s", name, f) }
	switch {
	case c.CertificateAuthority != "" && !allow.Files:
		return &UnsafeError{Field: field("certificate-authority"), Why: "makes the controller read a file of its own pod; use certificate-authority-data", OptIn: "insecureKubeconfig.files"}
	case c.ProxyURL != "" && !allow.Proxy:
		return &UnsafeError{Field: field("proxy-url"), Why: "sends the controller's requests, credentials included, through a proxy the kubeconfig chooses", OptIn: "insecureKubeconfig.proxy"}
	case c.InsecureSkipTLSVerify && !allow.TLS:
		return &UnsafeError{Field: field("insecure-skip-tls-verify"), Why: "turns off the check that the server is the cluster, so anyone on the path gets the credentials; set certificate-authority-data", OptIn: "insecureKubeconfig.tls"}
	}
	if u, err := url.Parse(c.Server); err == nil && strings.EqualFold(u.Scheme, "http") && !allow.TLS {
		return &UnsafeError{Field: field("server"), Why: fmt.Sprintf("is plain http (%s): the credentials would cross the network unencrypted", c.Server),
			OptIn: "insecureKubeconfig.tls", Fix: "use https://" + u.Host}
	}
	return nil
}

// RESTConfig parses a kubeconfig, refuses what the policy does not allow
// (before anything in it is used: no file is read, no plugin runs), and
// returns its REST config with the downstream request timeout.
func RESTConfig(kubeconfig []byte, allow config.InsecureKubeconfig) (*rest.Config, error) {
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, &Error{Reason: fleet.KubeConfigInvalidReason, Err: fmt.Errorf("the kubeconfig cannot be parsed: %w", err)}
	}
	if err := CheckKubeconfig(raw, allow); err != nil {
		return nil, &Error{Reason: fleet.KubeConfigUnsafeReason, Err: err}
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, &Error{Reason: fleet.KubeConfigInvalidReason, Err: fmt.Errorf("the kubeconfig cannot be parsed: %w", err)}
	}
	if cfg.Host == "" {
		return nil, &Error{Reason: fleet.KubeConfigInvalidReason, Err: errors.New("the kubeconfig names no server")}
	}
	if err := checkEffectiveServer(currentCluster(raw), cfg, allow); err != nil {
		return nil, err
	}
	cfg.Timeout = RequestTimeout
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "fleet-controller"
	return cfg, nil
}

// currentCluster is the name of the cluster entry the current context uses
// (the one RESTConfig builds a client for).
func currentCluster(raw *clientcmdapi.Config) string {
	if c, ok := raw.Contexts[raw.CurrentContext]; ok && c != nil {
		return c.Cluster
	}
	return ""
}

// checkEffectiveServer decides on the URL client-go will dial for cfg (the
// configuration clientcmd built), not on how the kubeconfig writes its
// server: clientcmd takes a server without a scheme ("10.0.0.5:8080",
// "host") for plain http and then leaves the CA and the credentials out,
// and rest.DefaultServerUrlFor says what is dialled. Only https is
// accepted, http with insecureKubeconfig.tls; anything client-go cannot
// dial as either is invalid.
func checkEffectiveServer(name string, cfg *rest.Config, allow config.InsecureKubeconfig) error {
	field := fmt.Sprintf("clusters[%q].server", name)
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return &Error{Reason: fleet.KubeConfigInvalidReason, Err: fmt.Errorf(
			"the kubeconfig's %s %q is not a server client-go can reach over https; write it as https://<host>:<port>", field, cfg.Host)}
	}
	if u.Scheme == "http" && !allow.TLS {
		return &Error{Reason: fleet.KubeConfigUnsafeReason, Err: &UnsafeError{Field: field, OptIn: "insecureKubeconfig.tls",
			Why: fmt.Sprintf("is %q, which client-go dials as plain http (http://%s; a server without https:// is plain http, and gets none of the kubeconfig's TLS settings): the controller's requests would cross the network unencrypted", cfg.Host, u.Host),
			Fix: "write it as https://" + u.Host}}
	}
	return nil
}

// ServerHash identifies the cluster a kubeconfig points at (server URL and
// CA), but not its credentials: rotating credentials does not change it. A
// kubeconfig the policy refuses is an error.
func ServerHash(kubeconfig []byte, allow config.InsecureKubeconfig) (string, error) {
	cfg, err := RESTConfig(kubeconfig, allow)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(cfg.Host))
	h.Write([]byte{0})
	h.Write(cfg.CAData)
	h.Write([]byte(cfg.CAFile))
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
