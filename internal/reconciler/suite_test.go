package reconciler_test

import (
	"testing"

	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// env is a real kube-apiserver and etcd (no controller manager: nothing
// here needs one) for the tests of Objects and StatusPatcher.
var env *controlplane.Env

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{NoControllerManager: true}}, func(s *testenv.Suite) error {
		env = s.Env
		return nil
	})
}

// newNamespace makes a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	return testenv.Namespace(t, env.Upstream.Client, "reconciler-")
}
