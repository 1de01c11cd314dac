package token

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/controlplane"
	"github.com/gitops-fleet/fleet/internal/testenv"
)

var (
	env   *controlplane.Env
	store *configstore.Store
	// logs holds everything the controller logged, so tests can prove no
	// bearer token ever reaches a log.
	logs syncBuffer
)

// initialConfig is the configuration the suite starts with; tests that change
// it put it back.
func initialConfig() *config.Config {
	return &config.Config{APIServerURL: "https://upstream.example.com:6443", APIServerCA: []byte("ca-pem")}
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testenv.Fuzzing() {
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	startCtx, startCancel := context.WithTimeout(ctx, 2*time.Minute)
	var err error
	env, err = controlplane.Start(startCtx, controlplane.Options{})
	startCancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()

	echo := os.Getenv("FLEET_TEST_LOG") != ""
	ctrl.SetLogger(funcr.New(func(prefix, args string) {
		line := prefix + " " + args
		logs.Write(line)
		if echo {
			fmt.Fprintln(os.Stderr, line)
		}
	}, funcr.Options{Verbosity: 1}))

	mgr, err := ctrl.NewManager(env.Upstream.Config, ctrl.Options{
		Scheme:  controlplane.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Client:  client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		// As controller/manager.go configures it.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	store = configstore.New(config.DefaultSystemNamespace, config.ConfigMapName, initialConfig())
	r := &Reconciler{
		Client:    mgr.GetClient(),
		Config:    store,
		Clientset: env.Upstream.Clientset,
		Recorder:  mgr.GetEventRecorder("fleet-controller"),
	}
	if err := r.SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgrCtx, mgrCancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()

	code := m.Run()

	mgrCancel()
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "manager did not stop within 30s")
	}
	return code
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(line)
	s.b.WriteByte('\n')
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newNamespace makes a namespace for one test.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := env.Upstream.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// eventually polls cond every 100ms until it holds, and fails the test after
// timeout naming what it waited for.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, lastErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
