package remote

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.0.0.1:6443", certificate-authority-data: Y2E=}
users:
- name: u
  user: {token: t1}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`

func TestServerHash_IgnoresCredentialsButNotTheServer(t *testing.T) {
	a, err := ServerHash([]byte(kubeconfig), config.InsecureKubeconfig{})
	if err != nil {
		t.Fatal(err)
	}
	rotated, _ := ServerHash([]byte(strings.Replace(kubeconfig, "token: t1", "token: t2", 1)), config.InsecureKubeconfig{})
	moved, _ := ServerHash([]byte(strings.Replace(kubeconfig, "10.0.0.1", "10.0.0.2", 1)), config.InsecureKubeconfig{})
	newCA, _ := ServerHash([]byte(strings.Replace(kubeconfig, "Y2E=", "Y2I=", 1)), config.InsecureKubeconfig{})
	if a != rotated {
		t.Error("a credential rotation changed the server hash: it would redeploy the agent")
	}
	if a == moved || a == newCA {
		t.Error("a new server or CA did not change the server hash")
	}
}

func TestRESTConfig_RejectsGarbageAsInputError(t *testing.T) {
	for _, in := range []string{"", "not yaml: [", "apiVersion: v1\nkind: Config\n"} {
		_, err := RESTConfig([]byte(in), config.InsecureKubeconfig{})
		if _, ok := err.(*InputError); !ok {
			t.Errorf("%q: want an InputError, got %v", in, err)
		}
	}
}

// FuzzRESTConfig: kubeconfig Secrets are untrusted input. Parsing must
// never panic, and whatever the policy lets through must use none of the
// features it refuses.
func FuzzRESTConfig(f *testing.F) {
	f.Add([]byte(kubeconfig))
	f.Add([]byte("clusters: [{cluster: {server: ':::'}}]"))
	for _, tc := range unsafeKubeconfigs {
		f.Add([]byte(strings.Replace(kubeconfig, tc.find, tc.replace, 1)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := RESTConfig(data, config.InsecureKubeconfig{})
		if err != nil {
			if _, ok := err.(*InputError); !ok {
				t.Fatalf("not an InputError: %v", err)
			}
			return
		}
		if cfg.ExecProvider != nil || cfg.AuthProvider != nil || cfg.BearerTokenFile != "" ||
			cfg.CertFile != "" || cfg.KeyFile != "" || cfg.CAFile != "" || cfg.Proxy != nil || cfg.Insecure {
			t.Fatalf("an unsafe kubeconfig passed the default policy: %+v", cfg)
		}
		if u, _, err := rest.DefaultServerUrlFor(cfg); err != nil || u.Scheme != "https" || u.Host == "" {
			t.Fatalf("a kubeconfig whose client would not dial https passed the default policy: server %q, dialled as %v (%v)", cfg.Host, u, err)
		}
	})
}

// unsafeKubeconfigs are edits of the kubeconfig above that each use one
// feature a kubeconfig Secret may not use by default, the field the refusal
// must name, and the switch that allows it.
var unsafeKubeconfigs = []struct {
	name, find, replace, field string
	allow                      config.InsecureKubeconfig
}{
	{"tokenFile (the controller's own token)", "token: t1", "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
		`users["u"].tokenFile`, config.InsecureKubeconfig{Files: true}},
	{"exec plugin", "token: t1", "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, id]}",
		`users["u"].exec`, config.InsecureKubeconfig{Exec: true}},
	{"auth-provider", "token: t1", "auth-provider: {name: oidc, config: {idp-issuer-url: https://idp.example.com}}",
		`users["u"].auth-provider`, config.InsecureKubeconfig{Exec: true}},
	{"client certificate file", "token: t1", "client-certificate: /etc/fleet/tls.crt",
		`users["u"].client-certificate`, config.InsecureKubeconfig{Files: true}},
	{"client key file", "token: t1", "client-key: /etc/fleet/tls.key",
		`users["u"].client-key`, config.InsecureKubeconfig{Files: true}},
	{"CA file", "certificate-authority-data: Y2E=", "certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
		`clusters["c"].certificate-authority`, config.InsecureKubeconfig{Files: true}},
	{"proxy", "certificate-authority-data: Y2E=", "certificate-authority-data: Y2E=, proxy-url: \"http://10.0.0.9:3128\"",
		`clusters["c"].proxy-url`, config.InsecureKubeconfig{Proxy: true}},
	{"TLS check off", "certificate-authority-data: Y2E=", "insecure-skip-tls-verify: true",
		`clusters["c"].insecure-skip-tls-verify`, config.InsecureKubeconfig{TLS: true}},
	{"plain http", "https://10.0.0.1:6443", "http://10.0.0.1:6443",
		`clusters["c"].server`, config.InsecureKubeconfig{TLS: true}},
}

func TestRESTConfig_RefusesWhatWouldUseMoreThanTheCredentials(t *testing.T) {
	for _, tc := range unsafeKubeconfigs {
		t.Run(tc.name, func(t *testing.T) {
			kc := []byte(strings.Replace(kubeconfig, tc.find, tc.replace, 1))
			_, err := RESTConfig(kc, config.InsecureKubeconfig{})
			var in *InputError
			if !errors.As(err, &in) || in.Reason != fleet.KubeConfigUnsafeReason || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("want %s refusing %s, got %v", fleet.KubeConfigUnsafeReason, tc.field, err)
			}
			if _, err := ServerHash(kc, config.InsecureKubeconfig{}); err == nil {
				t.Error("ServerHash accepted it: the import would go on")
			}
			// The switch named in the message allows exactly this (the
			// files named here do not exist: that is another error).
			if _, err := RESTConfig(kc, tc.allow); errors.As(err, &in) && in.Reason == fleet.KubeConfigUnsafeReason {
				t.Errorf("with %+v: %v", tc.allow, err)
			}
		})
	}
}

// TestRESTConfig_DecidesOnTheURLClientGoDials: the server is judged as
// client-go will dial it, not as it is written. clientcmd takes a server
// without a scheme for plain http, even with a CA (which it then leaves
// out, with the credentials), so "10.0.0.5:8080" is refused like
// "http://10.0.0.5:8080" and allowed by the same switch. What client-go
// cannot dial as http(s) at all is invalid, with or without the switch.
func TestRESTConfig_DecidesOnTheURLClientGoDials(t *testing.T) {
	const field = `clusters["c"].server`
	cases := []struct {
		server string
		ca     bool
		// want: "https" (accepted, dialled over https), "http" (refused
		// as unsafe; accepted with insecureKubeconfig.tls, dialled over
		// http), "invalid" (refused either way).
		want string
	}{
		{"10.0.0.5:8080", false, "http"},
		{"10.0.0.5:8080", true, "http"},
		{"host", false, "http"},
		{"host", true, "http"},
		{"HTTP://host", true, "http"},
		{"http://host:6443", true, "http"},
		{"https://host", false, "https"},
		{"https://host:6443/prefix", true, "https"},
		{"//host", false, "invalid"},
		{"//host", true, "invalid"},
		{"[fd00::1]:6443", false, "http"},
		{"[fd00::1]:6443", true, "http"},
		{"https://[fd00::1]:6443", true, "https"},
		{"unix:///var/run/kubernetes.sock", true, "invalid"},
		{"unix:///var/run/kubernetes.sock", false, "invalid"},
		{"tcp://host:6443", true, "invalid"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s ca=%v", tc.server, tc.ca), func(t *testing.T) {
			var ca []byte
			if tc.ca {
				ca = selfSignedCA(t)
			}
			kc := kubeconfigFor(t, tc.server, ca)
			for _, allow := range []config.InsecureKubeconfig{{}, {TLS: true}} {
				cfg, err := RESTConfig(kc, allow)
				var in *InputError
				switch {
				case tc.want == "invalid":
					if !errors.As(err, &in) || in.Reason != fleet.KubeConfigInvalidReason || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "https://") {
						t.Fatalf("allow %+v: want %s naming %s and the fix, got %v", allow, fleet.KubeConfigInvalidReason, field, err)
					}
				case tc.want == "http" && !allow.TLS:
					if !errors.As(err, &in) || in.Reason != fleet.KubeConfigUnsafeReason || !strings.Contains(err.Error(), field) ||
						!strings.Contains(err.Error(), "insecureKubeconfig.tls") || !strings.Contains(err.Error(), "https://") {
						t.Fatalf("want %s naming %s, https:// and the switch, got %v", fleet.KubeConfigUnsafeReason, field, err)
					}
				default:
					if err != nil {
						t.Fatalf("allow %+v: %v", allow, err)
					}
					u, _, err := rest.DefaultServerUrlFor(cfg)
					if err != nil || u.Scheme != tc.want {
						t.Fatalf("allow %+v: client-go dials %v (%v), want %s", allow, u, err, tc.want)
					}
				}
			}
		})
	}
}

func TestRESTConfig_UnusedEntriesAreCheckedToo(t *testing.T) {
	kc := strings.Replace(kubeconfig, "users:\n", "users:\n- name: laptop\n  user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}}\n", 1)
	_, err := RESTConfig([]byte(kc), config.InsecureKubeconfig{})
	if err == nil || !strings.Contains(err.Error(), `users["laptop"].exec`) {
		t.Errorf("an exec user outside the current context: %v", err)
	}
}

// selfSignedCA is a CA certificate no server here is signed by.
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// kubeconfigFor is a kubeconfig for server trusting ca, with a bearer token.
func kubeconfigFor(t *testing.T, server string, ca []byte) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Classify goes by the errors' types: real failures of a client built from
// a kubeconfig, and API errors as the ssa manager wraps them.
func TestClassify_ByErrorType(t *testing.T) {
	tlsServer := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsServer.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := strings.Replace(closed.URL, "http://", "https://", 1)
	closed.Close()

	get := func(t *testing.T, server string, ca []byte) error {
		t.Helper()
		rc, err := NewCache(scheme.Scheme).Get(types.NamespacedName{Name: t.Name()}, kubeconfigFor(t, server, ca), config.InsecureKubeconfig{})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		return rc.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, &corev1.Namespace{})
	}
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	immutable := apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "fleet-agent",
		field.ErrorList{field.Invalid(field.NewPath("spec", "selector"), "x", apivalidation.FieldImmutableErrorMsg)})
	for _, tc := range []struct {
		name string
		err  func(t *testing.T) error
		want string
	}{
		{"server certificate not signed by the kubeconfig's CA", func(t *testing.T) error { return get(t, tlsServer.URL, selfSignedCA(t)) }, fleet.DownstreamTLSErrorReason},
		{"nobody listening", func(t *testing.T) error { return get(t, closedURL, selfSignedCA(t)) }, fleet.DownstreamUnreachableReason},
		{"x509 error, wrapped", func(*testing.T) error {
			return fmt.Errorf("applying: %w", &url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}})
		}, fleet.DownstreamTLSErrorReason},
		{"TLS record from a non-TLS server", func(*testing.T) error {
			return fmt.Errorf("dial: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"})
		}, fleet.DownstreamTLSErrorReason},
		{"401", func(*testing.T) error { return apierrors.NewUnauthorized("no") }, fleet.DownstreamUnauthorizedReason},
		{"403", func(*testing.T) error { return apierrors.NewForbidden(gr, "fleet-agent", errors.New("no")) }, fleet.DownstreamForbiddenReason},
		{"field manager conflict", func(*testing.T) error {
			return fmt.Errorf("Deployment/x/fleet-agent apply failed: %w", apierrors.NewConflict(gr, "fleet-agent", errors.New("conflict with \"kubectl\"")))
		}, fleet.ApplyConflictReason},
		{"immutable field", func(*testing.T) error { return fmt.Errorf("Deployment/x/fleet-agent dry-run failed: %w", immutable) }, fleet.ApplyConflictReason},
		{"a kubeconfig problem", func(*testing.T) error {
			return &InputError{Reason: fleet.KubeConfigInvalidReason, Err: errors.New("bad")}
		}, fleet.KubeConfigInvalidReason},
		{"anything else", func(*testing.T) error { return errors.New("tls: x509: words are not types") }, fleet.ApplyFailedReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err(t)
			if err == nil {
				t.Fatal("no error")
			}
			if reason, msg := Classify("https://downstream", err); reason != tc.want || msg == "" {
				t.Errorf("Classify(%v) = %s, want %s", err, reason, tc.want)
			}
		})
	}
}
