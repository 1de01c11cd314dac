package agent

import (
	"errors"
	"fmt"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/connerr"
)

// fault is a failure the agent retries on its own that is not about its
// credential: an API server it cannot reach. It carries the reason the
// agent reports (log, event), so that a network fault is never told as a
// missing or rejected credential, whose fix is a reinstall.
type fault struct {
	Reason string
	msg    string
	err    error
}

func (f *fault) Error() string { return f.msg }
func (f *fault) Unwrap() error { return f.err }

// localFault wraps an error of a request to the agent's own (downstream)
// API server: a DownstreamAPIUnreachable fault when it never got an answer,
// else err with what was being done.
func localFault(err error, doing string) error {
	if connerr.IsUnreachable(err) {
		return &fault{Reason: fleet.DownstreamAPIUnreachableReason, err: err, msg: fmt.Sprintf(
			"%s: cannot reach the API server of this cluster (%v); the agent keeps its credentials and tries again. Check the API server and the network path from the agent's pod (or --kubeconfig)", doing, err)}
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// upstreamFault wraps an error of a request to the upstream API server at
// url: an UpstreamUnreachable fault when it never got an answer, else err
// with what was being done.
func upstreamFault(err error, url, doing string) error {
	switch {
	case connerr.IsTLS(err):
		return &fault{Reason: fleet.UpstreamUnreachableReason, err: err, msg: fmt.Sprintf(
			"%s: TLS with the upstream API server %s failed (%v): the CA the agent trusts (apiServerCA) does not match the server's certificate; the agent keeps its credentials and tries again", doing, url, err)}
	case connerr.IsUnreachable(err):
		return &fault{Reason: fleet.UpstreamUnreachableReason, err: err, msg: fmt.Sprintf(
			"%s: cannot reach the upstream API server %s (%v); the agent keeps its credentials and tries again. Check apiServerURL and the network path from this cluster to the upstream", doing, url, err)}
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// faultReason is the reason of err when it is a fault, "" otherwise.
func faultReason(err error) string {
	var f *fault
	if errors.As(err, &f) {
		return f.Reason
	}
	return ""
}
