package reconciler_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitops-fleet/fleet/internal/controlplane"
)

// env is a real kube-apiserver and etcd (no controller manager: nothing
// here needs one) for the tests of Objects and StatusPatcher.
var env *controlplane.Env

func TestMain(m *testing.M) {
	flag.Parse()
	if controlplane.Fuzzing() {
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	env, err = controlplane.Start(ctx, controlplane.Options{NoControllerManager: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	return m.Run()
}

// newNamespace makes a namespace for one test.
func newNamespace(t *testing.T) string {
	c := env.Upstream.Client
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "reconciler-"}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
