// Package testenv is the one test environment of the envtest suites: a
// TestMain that starts the control planes and what the tests share (Main,
// Suite), managers started and stopped within bounds (Go, Runner), the
// controller's own manager options (ManagerOptions), a namespace per test
// (Namespace), bounded polling (Eventually) and the captured log (Logs).
//
// Only tests import it (make layering checks that no other package does).
package testenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/renderenv"
	"github.com/gitops-fleet/fleet/internal/renderworker"
)

// Options configure Main.
type Options struct {
	// ControlPlanes are started before the tests (nil: none).
	ControlPlanes *controlplane.Options
	// StartTimeout bounds starting the control planes (zero: 3 minutes,
	// for a loaded machine).
	StartTimeout time.Duration
	// CaptureLogs keeps every log line (up to V(1)) in Suite.Logs, so tests
	// can prove what never reaches a log.
	CaptureLogs bool
}

// Suite is what the tests of a package share: the control planes, the
// log, and what setup started for them.
type Suite struct {
	// Env is the running control planes (nil without Options.ControlPlanes).
	Env *controlplane.Env
	// Logs is the captured log (empty without Options.CaptureLogs).
	Logs *Logs

	ctx     context.Context
	runners []*Runner
}

// Context is the suite's context: it ends after the tests ran.
func (s *Suite) Context() context.Context { return s.ctx }

// Go runs run (a manager, a controller) in the background for the whole
// suite. Main stops it after the tests, before the control planes.
func (s *Suite) Go(name string, run func(context.Context) error) *Runner {
	r := Go(s.ctx, name, run)
	s.runners = append(s.runners, r)
	return r
}

// stopTimeout bounds how long Main waits for what the suite started.
const stopTimeout = 30 * time.Second

// Main runs the tests of a package. It must be all of TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m, opts, setup) }
//
// In order: the binary serves as a render worker or as the renderer when
// started as one (the controller renders Bundles in a renderer started from
// the running binary, whose workers are the running binary too);
// flags are parsed; a fuzzing binary runs its targets without control
// planes; the logger is set up (Logs); the control planes start; setup (if
// not nil) starts what the tests share with Suite.Go; the tests run; what
// setup started is stopped, then the control planes.
func Main(m *testing.M, opts Options, setup func(*Suite) error) {
	renderworker.ServeIfWorker()
	renderenv.ServeIfRenderer()
	flag.Parse()
	if Fuzzing() {
		os.Exit(m.Run())
	}
	os.Exit(run(m, opts, setup))
}

func run(m *testing.M, opts Options, setup func(*Suite) error) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &Suite{ctx: ctx, Logs: setupLogging(opts.CaptureLogs)}
	if opts.ControlPlanes != nil {
		timeout := opts.StartTimeout
		if timeout == 0 {
			timeout = 3 * time.Minute
		}
		startCtx, startCancel := context.WithTimeout(ctx, timeout)
		env, err := controlplane.Start(startCtx, *opts.ControlPlanes)
		startCancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		s.Env = env
		defer func() {
			if err := env.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}
	code := 1
	if err := setupSuite(s, setup); err != nil {
		fmt.Fprintln(os.Stderr, "setting up the suite:", err)
	} else {
		code = m.Run()
	}
	stopShared()
	// What the suite started ends before the control planes do.
	cancel()
	for _, r := range slices.Backward(s.runners) {
		if err := r.Stop(stopTimeout); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	return code
}

func setupSuite(s *Suite, setup func(*Suite) error) error {
	if setup == nil {
		return nil
	}
	return setup(s)
}

// Runner is something running in the background (a manager, a controller,
// a deployer) that can be stopped and waited for within a bound.
type Runner struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	waited bool
}

// Go runs run in a goroutine with a context derived from ctx. Stop cancels
// that context; cancelling ctx ends it too.
func Go(ctx context.Context, name string, run func(context.Context) error) *Runner {
	ctx, cancel := context.WithCancel(ctx)
	r := &Runner{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = run(ctx)
	}()
	return r
}

// Start is Go for one test: the runner is stopped (within a minute) when the
// test ends, and an error it returned fails the test.
func Start(t testing.TB, name string, run func(context.Context) error) *Runner {
	t.Helper()
	r := Go(context.Background(), name, run)
	t.Cleanup(func() {
		if err := r.Stop(time.Minute); err != nil {
			t.Error(err)
		}
	})
	return r
}

// Done is closed when the runner returned.
func (r *Runner) Done() <-chan struct{} { return r.done }

// Err is what the runner returned (nil while it runs).
func (r *Runner) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// Wait waits up to timeout for the runner to return and returns its error
// (once: waiting again returns nil), or an error saying it did not return.
func (r *Runner) Wait(timeout time.Duration) error {
	select {
	case <-r.done:
	case <-time.After(timeout):
		return fmt.Errorf("%s did not stop within %s", r.name, timeout)
	}
	if r.waited {
		return nil
	}
	r.waited = true
	if r.err != nil && !errors.Is(r.err, context.Canceled) {
		return fmt.Errorf("%s: %w", r.name, r.err)
	}
	return nil
}

// Stop ends the runner's context and waits (see Wait). Stopping a stopped
// runner returns at once.
func (r *Runner) Stop(timeout time.Duration) error {
	r.cancel()
	return r.Wait(timeout)
}

// StartControlPlanes starts control planes for one test (within 3 minutes)
// and stops them when the test ends, after the test's defers and the
// Cleanups registered after it.
func StartControlPlanes(t testing.TB, opts controlplane.Options) *controlplane.Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	env, err := controlplane.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	return env
}

// SharedControlPlanes returns the package's control planes started with
// opts: the first test that asks starts them, the next ones with the same
// opts reuse them, and Main stops them when the package's tests end. A
// start costs several seconds of CPU (far more on a loaded machine), so
// tests that isolate by namespace (Namespace) and change nothing
// cluster-wide share; the others use StartControlPlanes.
func SharedControlPlanes(t testing.TB, opts controlplane.Options) *controlplane.Env {
	t.Helper()
	key := fmt.Sprintf("%#v", opts)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if e, ok := shared.envs[key]; ok {
		if e.err != nil {
			t.Fatalf("the shared control planes did not start: %v", e.err)
		}
		return e.env
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := controlplane.Start(ctx, opts)
	if shared.envs == nil {
		shared.envs = map[string]*sharedEnv{}
	}
	shared.envs[key] = &sharedEnv{env: env, err: err}
	if err != nil {
		t.Fatalf("the shared control planes did not start: %v", err)
	}
	return env
}

type sharedEnv struct {
	env *controlplane.Env
	err error
}

var shared struct {
	mu   sync.Mutex
	envs map[string]*sharedEnv
}

// stopShared stops what SharedControlPlanes started.
func stopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for _, e := range shared.envs {
		if e.env != nil {
			if err := e.env.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
	}
	shared.envs = nil
}
