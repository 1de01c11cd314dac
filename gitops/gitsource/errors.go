package gitsource

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/skeema/knownhosts"
)

// Reason says what failed, for a status condition's reason.
type Reason string

const (
	ReasonInvalid         Reason = "InvalidSource"      // the URL, ref, Secret or options are wrong
	ReasonAuthFailed      Reason = "AuthFailed"         // the server refused the credentials, or wants some
	ReasonHostKeyUnknown  Reason = "HostKeyUnknown"     // the SSH server's key is not in known_hosts
	ReasonHostKeyMismatch Reason = "HostKeyMismatch"    // the SSH server's key differs from known_hosts
	ReasonTLS             Reason = "TLSError"           // the https certificate is not trusted
	ReasonNotFound        Reason = "RepositoryNotFound" // no repository at that URL
	ReasonRefNotFound     Reason = "RefNotFound"        // no such branch, tag or commit
	ReasonUnreachable     Reason = "Unreachable"        // no connection to the server
	ReasonTimeout         Reason = "Timeout"            // the operation's time limit was hit
	ReasonLimitExceeded   Reason = "LimitExceeded"      // a size or count limit was hit
	ReasonUnsafeContent   Reason = "UnsafeContent"      // the tree has a link outside it, a loop, or a name git refuses
	ReasonFailed          Reason = "GitError"           // anything else
)

// Error is every error of this package: which operation on which repository failed, why,
// and what to do. It never holds a credential.
type Error struct {
	Op     string // ls-remote, fetch, checkout, tree-hash
	Repo   string // the normalised URL (no user or password)
	Reason Reason
	Msg    string
	Err    error // the cause, when there is one
}

func (e *Error) Error() string {
	if e.Repo == "" {
		return fmt.Sprintf("%s: %s", e.Op, e.Msg)
	}
	return fmt.Sprintf("%s %s: %s", e.Op, e.Repo, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// ReasonOf is the Reason of an error of this package, ReasonFailed for any other.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonFailed
}

// limitError is a limit that was hit, so that classify keeps its words.
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

// contentError is a tree that cannot be checked out safely.
type contentError struct{ msg string }

func (e *contentError) Error() string { return e.msg }

func unsafeContent(format string, args ...any) error {
	return &contentError{msg: fmt.Sprintf(format, args...)}
}

// classify turns a go-git, TLS, SSH or network error into an *Error with a reason a user can
// act on. withCredentials says whether credentials were sent (a 401 then means refused).
func classify(op, repo string, withCredentials bool, err error) *Error {
	var own *Error
	if errors.As(err, &own) {
		return own
	}
	e := &Error{Op: op, Repo: repo, Err: err, Reason: ReasonFailed, Msg: err.Error()}
	var (
		lim     *limitError
		content *contentError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		verify  *tls.CertificateVerificationError
		netErr  net.Error
		opErr   *net.OpError
	)
	switch {
	case errors.As(err, &lim):
		e.Reason, e.Msg = ReasonLimitExceeded, lim.msg
	case errors.As(err, &content):
		e.Reason = ReasonUnsafeContent
	case errors.Is(err, context.DeadlineExceeded):
		e.Reason, e.Msg = ReasonTimeout, "timed out: "+err.Error()
	case errors.Is(err, transport.ErrAuthenticationRequired) && withCredentials:
		e.Reason, e.Msg = ReasonAuthFailed, "the server refused the client Secret's credentials"
	case errors.Is(err, transport.ErrAuthenticationRequired):
		e.Reason, e.Msg = ReasonAuthFailed, "the server wants credentials: set the GitRepo's clientSecretName to a Secret with username/password or token (https) or ssh-privatekey and known_hosts (ssh)"
	case errors.Is(err, transport.ErrAuthorizationFailed):
		e.Reason, e.Msg = ReasonAuthFailed, "the server refused the client Secret's credentials (or they lack read access to the repository)"
	case knownhosts.IsHostKeyChanged(err):
		e.Reason, e.Msg = ReasonHostKeyMismatch, "the SSH server's host key does not match known_hosts: if the server's key really changed, update known_hosts in the client Secret after checking the new key out of band"
	case strings.Contains(err.Error(), "no common algorithm for host key"):
		e.Reason, e.Msg = ReasonHostKeyMismatch, "the SSH server offers no host key of the types known_hosts lists for it: if the server's key really changed, update known_hosts in the client Secret after checking the new key out of band"
	case knownhosts.IsHostUnknown(err):
		e.Reason, e.Msg = ReasonHostKeyUnknown, "the SSH server's host key is not in known_hosts: add it (for its host and port) to the client Secret's known_hosts"
	case strings.Contains(err.Error(), "unable to authenticate"):
		e.Reason, e.Msg = ReasonAuthFailed, "the SSH server refused the client Secret's ssh-privatekey: "+err.Error()
	case errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &invalid), errors.As(err, &verify):
		e.Reason, e.Msg = ReasonTLS, "the server's TLS certificate is not trusted: set the GitRepo's caBundle to the CA that signed it: "+err.Error()
	case errors.Is(err, transport.ErrRepositoryNotFound):
		e.Reason, e.Msg = ReasonNotFound, "no repository at this URL (or it is private and the credentials do not reach it)"
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		e.Reason, e.Msg = ReasonRefNotFound, "the repository is empty: it has no branch or tag yet"
	case errors.As(err, &netErr) && netErr.Timeout():
		e.Reason, e.Msg = ReasonTimeout, "timed out: "+err.Error()
	case errors.As(err, &opErr), errors.As(err, &netErr):
		e.Reason, e.Msg = ReasonUnreachable, "cannot reach the server: "+err.Error()
	}
	return e
}
