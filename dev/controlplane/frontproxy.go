package controlplane

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
	"net"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
)

// FrontProxyClientName is the common name of the aggregator's (front-proxy)
// client certificate, the one name --requestheader-allowed-names allows.
const FrontProxyClientName = "front-proxy-client"

// ExtensionAuthConfigMap names the ConfigMap kube-apiserver writes in
// kube-system for extension (aggregated) API servers: its client CA, the
// requestheader CA, the allowed names and the header names.
const (
	ExtensionAuthNamespace = "kube-system"
	ExtensionAuthConfigMap = "extension-apiserver-authentication"
)

// frontProxy holds the files of a control plane's aggregation layer: a CA
// that signs the front-proxy client certificate kube-apiserver presents to
// aggregated API servers.
type frontProxy struct {
	caPEM             []byte
	caFile            string
	certFile, keyFile string
}

// newFrontProxy writes a front-proxy CA and a client certificate signed by it
// (CN front-proxy-client) into dir.
func newFrontProxy(dir string) (*frontProxy, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "front-proxy-ca"}, caKey)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: FrontProxyClientName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, key.Public(), caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	fp := &frontProxy{
		caPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}),
		caFile:   filepath.Join(dir, "front-proxy-ca.crt"),
		certFile: filepath.Join(dir, "front-proxy-client.crt"),
		keyFile:  filepath.Join(dir, "front-proxy-client.key"),
	}
	for f, b := range map[string][]byte{
		fp.caFile:   fp.caPEM,
		fp.certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		fp.keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return nil, err
		}
	}
	return fp, nil
}

// flags are the kube-apiserver flags of the aggregation layer.
func (fp *frontProxy) flags() [][2]string {
	return [][2]string{
		{"requestheader-client-ca-file", fp.caFile},
		{"requestheader-allowed-names", FrontProxyClientName},
		{"requestheader-username-headers", "X-Remote-User"},
		{"requestheader-group-headers", "X-Remote-Group"},
		{"requestheader-extra-headers-prefix", "X-Remote-Extra-"},
		{"proxy-client-cert-file", fp.certFile},
		{"proxy-client-key-file", fp.keyFile},
		// Nothing routes Service IPs here (no kube-proxy): the aggregator
		// dials an aggregated server's endpoints directly.
		{"enable-aggregator-routing", "true"},
	}
}

// RequestHeaderCA is the PEM of the CA that signs the front-proxy client
// certificate this control plane's aggregator presents to aggregated API
// servers (what --requestheader-client-ca-file holds).
func (cp *ControlPlane) RequestHeaderCA() []byte {
	if cp.frontProxy == nil {
		return nil
	}
	return cp.frontProxy.caPEM
}

// ExtensionAuthentication returns the extension-apiserver-authentication
// ConfigMap kube-apiserver writes in kube-system, waiting (up to a minute)
// until it holds the requestheader settings. Aggregated API servers read
// their client and requestheader CAs from it.
func (cp *ControlPlane) ExtensionAuthentication(ctx context.Context) (*corev1.ConfigMap, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var lastErr error
	for {
		cm, err := cp.Clientset.CoreV1().ConfigMaps(ExtensionAuthNamespace).Get(ctx, ExtensionAuthConfigMap, metav1.GetOptions{})
		switch {
		case err != nil:
			lastErr = err
		case cm.Data["requestheader-client-ca-file"] == "":
			lastErr = errors.New("no requestheader-client-ca-file in it yet")
		default:
			return cm, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s/%s on %s: %w", ExtensionAuthNamespace, ExtensionAuthConfigMap, cp.Name, lastErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// AggregatedServerHost returns an IPv4 address of this machine, not a
// loopback one, for an aggregated API server started by a test to listen on:
// the aggregator dials the endpoints of the APIService's Service, and
// EndpointSlices refuse loopback addresses.
func AggregatedServerHost() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() || ipn.IP.To4() == nil {
			continue
		}
		return ipn.IP.String(), nil
	}
	return "", errors.New("this machine has no IPv4 address other than loopback for an aggregated API server to listen on")
}

// FrontProxyClientCertificate is the client certificate kube-apiserver's
// aggregator presents to aggregated API servers, for tests that stand in for
// the aggregator.
func (cp *ControlPlane) FrontProxyClientCertificate() (tls.Certificate, error) {
	if cp.frontProxy == nil {
		return tls.Certificate{}, errors.New("no front-proxy certificate")
	}
	return tls.LoadX509KeyPair(cp.frontProxy.certFile, cp.frontProxy.keyFile)
}
