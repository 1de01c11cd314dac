package bootstrap_test

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/controller"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/config"
)

var (
	env  *controlplane.Env
	up   client.Client
	ctrl *controller.Controller
	logs *testenv.Logs
)

// One control plane is both the management cluster and the local cluster.
// The whole controller runs with exactly the rights charts/fleet gives it,
// with the chart's bootstrap identity installed, and with the defaults
// (bootstrap on, no apiServerURL: the local agent needs none). Every log
// line is kept, to prove the local cluster's token reaches none.
func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{}, CaptureLogs: true}, func(s *testenv.Suite) error {
		env, up, logs = s.Env, s.Env.Upstream.Client, s.Logs
		identity, err := env.Upstream.FleetControllerIdentity(s.Context(), config.DefaultSystemNamespace)
		if err != nil {
			return err
		}
		ctrl, err = controller.New(s.Context(), controller.Options{
			RestConfig:     identity,
			MetricsAddress: "0",
			ProbeAddress:   "0",
		})
		if err != nil {
			return err
		}
		s.Go("controller", ctrl.Start)
		return nil
	})
}
