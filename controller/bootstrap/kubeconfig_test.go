package bootstrap

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/controller/remote/restconfig"
	"github.com/gitops-fleet/fleet/internal/config"
)

func TestToken_RenewedWhenAThirdIsLeft(t *testing.T) {
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tok := token{issued: issued, expires: issued.Add(24 * time.Hour)}
	if got, want := tok.renewAt(), issued.Add(16*time.Hour); !got.Equal(want) {
		t.Errorf("renewAt %s, want %s", got, want)
	}
	// A server that grants less than asked: still renewed before expiry,
	// never at once.
	tok.expires = issued.Add(10 * time.Minute)
	if got := tok.renewAt(); !got.After(issued) || !got.Before(tok.expires) {
		t.Errorf("renewAt %s for a 10m token issued %s", got, issued)
	}
}

// TestSecret_RoundTripsItsTokenAndPassesTheKubeconfigPolicy: the Secret's
// kubeconfig holds the credential itself (inline token, CA data), which the
// controller's default kubeconfig policy accepts, and the token is read
// back only for the ServiceAccount it was minted for.
func TestSecret_RoundTripsItsTokenAndPassesTheKubeconfigPolicy(t *testing.T) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{UID: "sa-1"}}
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in := token{bearer: "bearer-1", issued: issued, expires: issued.Add(TokenLifetime), saUID: sa.UID}
	s, err := secret(client.ObjectKey{Namespace: "fleet-local", Name: SecretName}, Server{URL: "https://10.43.0.1:443", CA: []byte("ca")}, in)
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data["apiServerURL"]) != "https://10.43.0.1:443" || string(s.Data["apiServerCA"]) != "ca" || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("secret %v", s.Data)
	}
	cfg, err := restconfig.RESTConfig(s.Data["value"], config.InsecureKubeconfig{})
	if err != nil {
		t.Fatalf("the default kubeconfig policy refuses the local cluster's kubeconfig: %v", err)
	}
	if cfg.Host != "https://10.43.0.1:443" || cfg.BearerToken != "bearer-1" || string(cfg.CAData) != "ca" {
		t.Errorf("rest config %s %q", cfg.Host, cfg.CAData)
	}
	got, ok := tokenOf(s, sa)
	if !ok || got != in {
		t.Errorf("tokenOf = %+v, %v; want %+v", got, ok, in)
	}
	if _, ok := tokenOf(s, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{UID: "sa-2"}}); ok {
		t.Error("a token of a deleted ServiceAccount was kept")
	}
	s.Data["value"] = []byte("not: [a kubeconfig")
	if _, ok := tokenOf(s, sa); ok {
		t.Error("a token read from a broken kubeconfig")
	}
}

func TestServerOf_InClusterAndKubeconfigAddresses(t *testing.T) {
	for _, tc := range []struct {
		cfg  rest.Config
		want string
	}{
		{rest.Config{Host: "https://10.43.0.1:443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}}, "https://10.43.0.1:443"},
		{rest.Config{Host: "127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}}, "https://127.0.0.1:6443"},
	} {
		got, err := ServerOf(&tc.cfg)
		if err != nil || got.URL != tc.want || string(got.CA) != "ca" {
			t.Errorf("ServerOf(%s) = %+v, %v; want %s", tc.cfg.Host, got, err, tc.want)
		}
	}
	if _, err := ServerOf(&rest.Config{Host: "https://10.43.0.1", TLSClientConfig: rest.TLSClientConfig{CAFile: "/nonexistent/ca.crt"}}); err == nil {
		t.Error("a CA file that cannot be read was ignored")
	}
}
