package reconciler

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// ManagerStopWithin bounds the wait for a stopped manager: its graceful
// shutdown (30 s by default) and a margin.
const ManagerStopWithin = 45 * time.Second

// RunManager runs mgr until ctx ends and returns what its Start returned.
// Once ctx ended it waits at most stopWithin for Start to return, then
// gives up with an error, so the process exits instead of hanging:
// controller-runtime's manager (up to v0.25.3) never returns when it is
// stopped while its caches are still starting, for example when SIGTERM
// arrives before an informer synced or when one cannot sync for lack of
// permissions (kubernetes-sigs/controller-runtime#3440).
func RunManager(ctx context.Context, mgr manager.Manager, stopWithin time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		return err
	case <-time.After(stopWithin):
		return fmt.Errorf("the manager did not stop within %s of the stop signal (its caches were still starting); exiting anyway", stopWithin)
	}
}
