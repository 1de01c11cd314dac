package testenv

import (
	"context"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gitops-fleet/fleet/controller/manageroptions"
	"github.com/gitops-fleet/fleet/internal/config"
)

// ManagerOptions are the fleet controller's manager options
// (controller/manageroptions, for the default system namespace) for a
// manager a test assembles itself, plus what tests need: no metrics
// listener, and controllers may be set up again by another manager in the
// same process (a restarted "controller process"). With base set, the
// reconcilers' contexts derive from it, so cancelling it ends a pass in
// flight at once.
func ManagerOptions(base context.Context) ctrl.Options {
	opts := manageroptions.New(config.DefaultSystemNamespace)
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	opts.Controller = crconfig.Controller{SkipNameValidation: ptr.To(true)}
	if base != nil {
		opts.BaseContext = func() context.Context { return base }
	}
	return opts
}
