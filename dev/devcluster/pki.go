package devcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
)

// pki is one cluster's certificate authority and the files made from it.
// Every cluster has its own CA, so a client holding one cluster's CA cannot
// be fooled by another cluster's API server.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// newPKI writes ca.crt/ca.key, the API server's serving certificate, the
// admin client certificate, the kubelet's serving certificate and the
// service-account signing key into dir.
func newPKI(dir string, serviceIP net.IP) (*pki, error) {
	p, err := newCA(dir, "ca", "fleet-dev-ca")
	if err != nil {
		return nil, err
	}
	loopback := []net.IP{net.IPv4(127, 0, 0, 1), serviceIP}
	apiNames := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if err := p.issue("apiserver", "kube-apiserver", nil, apiNames, loopback, x509.ExtKeyUsageServerAuth); err != nil {
		return nil, err
	}
	if err := p.issue("admin", "fleet-dev-admin", []string{"system:masters"}, nil, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	if err := p.issue("kubelet", "localhost", nil, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth); err != nil {
		return nil, err
	}
	// The aggregation layer: a CA of its own signs the client certificate
	// the aggregator presents to aggregated API servers (fleet-proxy), so
	// that certificate authenticates nobody to the API server itself.
	fp, err := newCA(dir, "front-proxy-ca", "fleet-dev-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	if err := fp.issue("front-proxy-client", frontProxyClientName, nil, nil, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.path("sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	return p, writePEM(p.path("sa.pub"), "PUBLIC KEY", pub)
}

// frontProxyClientName is the aggregator's client certificate's name, the
// one --requestheader-allowed-names allows.
const frontProxyClientName = "front-proxy-client"

// newCA writes <name>.crt and <name>.key, a new CA, into dir; certificates
// it issues land beside them.
func newCA(dir, name, cn string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: ca, caKey: key}
	if err := writePEM(p.path(name+".crt"), "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return p, writeKey(p.path(name+".key"), key)
}

func (p *pki) issue(name, cn string, orgs, dns []string, ips []net.IP, usage x509.ExtKeyUsage) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return fmt.Errorf("issue %s certificate: %w", name, err)
	}
	if err := writePEM(p.path(name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(p.path(name+".key"), key)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// UserConfig is a config for the cluster from the host as user name in
// groups, authenticated by a client certificate its CA issues now (how a
// person logs in to a dev cluster; e2e tests play users with it).
func (c *Cluster) UserConfig(name string, groups ...string) (*rest.Config, error) {
	dir := filepath.Join(c.Dir, "pki")
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, err
	}
	caBlock, _ := pem.Decode(caPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if caBlock == nil || keyBlock == nil {
		return nil, fmt.Errorf("cluster %s: unreadable CA in %s", c.Name, dir)
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		return nil, err
	}
	caKey, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host: fmt.Sprintf("https://127.0.0.1:%d", c.APIPort),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			KeyData:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		},
		QPS: 50, Burst: 100,
	}, nil
}
