// Package connerr tells a request that never reached an API server (no
// route, refused, timed out, DNS, TLS) apart from an answer of the server
// (401, 403, 404...): the first needs the network or the URL fixed, the
// second the credential or the object. It goes by the errors' types, never
// by their text.
package connerr

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// IsTLS reports whether err is a failed TLS handshake or certificate check,
// by the error types crypto/tls and crypto/x509 return.
func IsTLS(err error) bool {
	var (
		verification     *tls.CertificateVerificationError
		recordHeader     tls.RecordHeaderError
		alert            tls.AlertError
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		systemRoots      x509.SystemRootsError
		constraint       x509.ConstraintViolationError
		critical         x509.UnhandledCriticalExtension
		algorithm        x509.InsecureAlgorithmError
	)
	return errors.As(err, &verification) || errors.As(err, &recordHeader) || errors.As(err, &alert) ||
		errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &systemRoots) || errors.As(err, &constraint) || errors.As(err, &critical) || errors.As(err, &algorithm)
}

// IsUnreachable reports whether err says the API server could not be
// reached or did not answer: a transport error (connection refused or
// reset, timeout, DNS, TLS) rather than an API status, or a 503/504 status
// (an API server, or the load balancer before it, that is not serving).
// A 401 or 403 is never unreachable: the server answered.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err)
	}
	var urlErr *url.Error
	var netErr net.Error
	var opErr *net.OpError
	var dnsErr *net.DNSError
	return IsTLS(err) || errors.As(err, &urlErr) || errors.As(err, &netErr) || errors.As(err, &opErr) || errors.As(err, &dnsErr)
}
