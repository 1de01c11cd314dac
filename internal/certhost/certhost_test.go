package certhost

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"
)

// TestCheck: the names a real certificate carries cover a URL's host
// exactly when crypto/x509 (and so kubectl) accepts the certificate for it.
func TestCheck(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		// The common name is not a SAN: no client matches on it.
		Subject:     pkix.Name{CommonName: "cn-only.example.com"},
		NotBefore:   time.Now().Add(-time.Hour),
		NotAfter:    time.Now().Add(time.Hour),
		DNSNames:    []string{"dev-1.example.com", "*.apps.example.com"},
		IPAddresses: []net.IP{net.ParseIP("10.0.0.5"), net.ParseIP("fd00::5")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	names := Names(cert)
	if want := []string{"dev-1.example.com", "*.apps.example.com", "10.0.0.5", "fd00::5"}; !slices.Equal(names, want) {
		t.Fatalf("Names %v, want %v", names, want)
	}
	for _, tc := range []struct {
		url    string
		covers bool
	}{
		{"https://dev-1.example.com:6443", true},
		{"https://DEV-1.example.com", true},
		{"https://a.apps.example.com:443", true},
		{"https://a.b.apps.example.com", false}, // a wildcard matches one label
		{"https://apps.example.com", false},
		{"https://10.0.0.5:30443", true},
		{"https://[fd00::5]:8443", true},
		{"https://10.0.0.6:30443", false},
		{"https://cn-only.example.com", false},
		{"https://dev-2.example.com", false},
	} {
		err := Check(names, tc.url)
		if want := cert.VerifyHostname(hostOf(t, tc.url)) == nil; want != tc.covers {
			t.Fatalf("%s: the table says covers=%v, crypto/x509 says %v", tc.url, tc.covers, want)
		}
		var m *Mismatch
		switch {
		case tc.covers && err != nil:
			t.Errorf("%s: %v, want covered", tc.url, err)
		case !tc.covers && !errors.As(err, &m):
			t.Errorf("%s: %v, want a *Mismatch", tc.url, err)
		case !tc.covers && (m.Host != hostOf(t, tc.url) || !slices.Equal(m.Names, names)):
			t.Errorf("%s: mismatch %+v does not name the host and the certificate's names", tc.url, m)
		}
	}
	if err := Check(nil, "https://dev-1.example.com"); err == nil || err.Error() != `the certificate names no host (it has no subject alternative names), so it does not cover "dev-1.example.com"` {
		t.Errorf("no names: %v", err)
	}
	if err := Check(names, "https:///nohost"); err == nil {
		t.Error("a URL without a host is covered")
	}
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname()
}
