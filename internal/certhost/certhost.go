// Package certhost says whether a serving certificate covers the host of
// the URL its users dial, by crypto/x509's rules (Certificate.VerifyHostname:
// an IP address must be one of the IP SANs, a name must match a DNS SAN,
// where a leading "*." matches exactly one label; the subject's common name
// does not count), which are the rules kubectl's TLS check applies. The
// agent checks its direct endpoint's certificate with it and reports the
// certificate's names; the controller and `fleet kubeconfig` check those
// names against the Cluster's url.
package certhost

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Names are the names a certificate is valid for: its DNS SANs, then its IP
// SANs.
func Names(cert *x509.Certificate) []string {
	out := append([]string(nil), cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

// Mismatch: the certificate's names do not cover the URL's host.
type Mismatch struct {
	Host  string
	Names []string
}

func (m *Mismatch) Error() string {
	if len(m.Names) == 0 {
		return fmt.Sprintf("the certificate names no host (it has no subject alternative names), so it does not cover %q", m.Host)
	}
	return fmt.Sprintf("the certificate is valid for %s, not for %q", strings.Join(m.Names, ", "), m.Host)
}

// Check returns nil when names (as Names gives them) cover the host of
// rawURL, a *Mismatch when they do not, and another error for a URL without
// a host.
func Check(names []string, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("url %q has no host", rawURL)
	}
	cert := &x509.Certificate{}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			cert.IPAddresses = append(cert.IPAddresses, ip)
		} else {
			cert.DNSNames = append(cert.DNSNames, n)
		}
	}
	if cert.VerifyHostname(host) != nil {
		return &Mismatch{Host: host, Names: names}
	}
	return nil
}
