package agent

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// ConnectOnce makes one attempt to connect: with the stored credential, or
// by registering.
func (a *Agent) ConnectOnce(ctx context.Context) error {
	_, err := a.connect(ctx)
	return err
}

// FaultReason is the reason of a network fault the agent reports, "" for
// any other error.
func FaultReason(err error) string { return faultReason(err) }

// CreateRegistration creates reg as the agent does, through c.
func (a *Agent) CreateRegistration(ctx context.Context, c client.Client, reg *fleet.ClusterRegistration) error {
	_, err := a.createRegistration(ctx, c, reg)
	return err
}
