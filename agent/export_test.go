package agent

import "context"

// ConnectOnce makes one attempt to connect: with the stored credential, or
// by registering.
func (a *Agent) ConnectOnce(ctx context.Context) error {
	_, err := a.connect(ctx)
	return err
}

// FaultReason is the reason of a network fault the agent reports, "" for
// any other error.
func FaultReason(err error) string { return faultReason(err) }
