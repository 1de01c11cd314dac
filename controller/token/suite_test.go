package token

import (
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/config"
)

var (
	env   *controlplane.Env
	store *configstore.Store
	// logs holds everything the controller logged, so tests can prove no
	// bearer token ever reaches a log.
	logs *testenv.Logs
)

// initialConfig is the configuration the suite starts with; tests that change
// it put it back.
func initialConfig() *config.Config {
	return &config.Config{APIServerURL: "https://upstream.example.com:6443", APIServerCA: []byte("ca-pem")}
}

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{}, CaptureLogs: true}, func(s *testenv.Suite) error {
		env, logs = s.Env, s.Logs
		mgr, err := ctrl.NewManager(env.Upstream.Config, testenv.ManagerOptions(nil))
		if err != nil {
			return err
		}
		store = configstore.New(config.DefaultSystemNamespace, config.ConfigMapName, initialConfig())
		r := &Reconciler{
			Client:    mgr.GetClient(),
			Config:    store,
			Clientset: env.Upstream.Clientset,
			Recorder:  mgr.GetEventRecorder("fleet-controller"),
		}
		if err := r.SetupWithManager(mgr); err != nil {
			return err
		}
		s.Go("token controller", mgr.Start)
		return nil
	})
}

// reconcileCount returns how many reconciles the controller finished so far.
func reconcileCount(t *testing.T) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == ControllerName {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
