package restconfig

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/remote/remotetest"
	"github.com/gitops-fleet/fleet/internal/config"
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

func TestRESTConfig_RejectsGarbageAsError(t *testing.T) {
	for _, in := range []string{"", "not yaml: [", "apiVersion: v1\nkind: Config\n"} {
		_, err := RESTConfig([]byte(in), config.InsecureKubeconfig{})
		if _, ok := err.(*Error); !ok {
			t.Errorf("%q: want an *Error, got %v", in, err)
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
			if _, ok := err.(*Error); !ok {
				t.Fatalf("not an *Error: %v", err)
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
			var in *Error
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
				ca = remotetest.SelfSignedCA(t)
			}
			kc := remotetest.Kubeconfig(t, tc.server, ca)
			for _, allow := range []config.InsecureKubeconfig{{}, {TLS: true}} {
				cfg, err := RESTConfig(kc, allow)
				var in *Error
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
