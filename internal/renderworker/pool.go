package renderworker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/bundlefiles"
)

// Limits bound the rendering of Bundles.
type Limits struct {
	// Size bounds a Bundle's decoded resources.
	Size bundlefiles.SizeLimits
	// Timeout bounds one render, from the worker's start.
	Timeout time.Duration
	// Memory bounds one worker, in bytes.
	Memory int64
	// Concurrency bounds how many workers run at once.
	Concurrency int
}

// LimitsOf returns the limits a controller configuration sets.
func LimitsOf(cfg *config.Config) Limits {
	return Limits{
		Size:        bundlefiles.SizeLimitsOf(cfg),
		Timeout:     cfg.GetBundleRenderTimeout(),
		Memory:      cfg.GetBundleRenderMemoryLimit(),
		Concurrency: cfg.GetBundleRenderConcurrency(),
	}
}

// RenderError is a render that failed because of the Bundle: its author has
// to change it. Any other error from Render is the controller's own trouble
// (a worker that could not start) and worth a retry.
type RenderError struct {
	// Reason is the Bundle condition reason (api/v1alpha1).
	Reason string
	// Message says what to fix. It never holds the Bundle's content beyond
	// what the author wrote in a file name or a kustomization field.
	Message string
	// MaxRSS is the worker's peak resident memory in bytes (0: unknown).
	MaxRSS int64
}

func (e *RenderError) Error() string { return e.Message }

// Pool runs render workers, at most Limits.Concurrency at once. Limits are
// read at every render, so a configuration change applies to the next one.
type Pool struct {
	limits func() Limits
	exe    string
	slots  Slots
}

// NewPool returns a pool that starts the running binary as its workers; the
// binary must call ServeIfWorker first thing in main.
func NewPool(limits func() Limits) (*Pool, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the running binary for render workers: %w", err)
	}
	return &Pool{limits: limits, exe: exe}, nil
}

// Limits returns the limits renders run under now.
func (p *Pool) Limits() Limits { return p.limits() }

// Render renders a Bundle's resources with options (already merged with the
// target's) in a worker: what bundlefiles.Decode and renderer.RenderFiles
// do in-process, bounded in time, memory and network access.
func (p *Pool) Render(ctx context.Context, name string, resources []fleet.BundleResource, opts fleet.BundleDeploymentOptions) (*renderer.Output, error) {
	return p.RenderWithin(ctx, p.limits(), Request{Name: name, Resources: resources, Options: opts})
}

// RenderFor is Render for one target cluster: values are the inputs of its
// Helm values (the templates' context, the valuesFrom content).
func (p *Pool) RenderFor(ctx context.Context, name string, resources []fleet.BundleResource, opts fleet.BundleDeploymentOptions, values *renderer.ClusterValues) (*renderer.Output, error) {
	return p.RenderWithin(ctx, p.limits(), Request{Name: name, Resources: resources, Options: opts, Values: values})
}

// RenderWithin renders r under the limits given instead of the pool's (its
// size limits are set from lim): the renderer service renders under the
// limits each request carries.
func (p *Pool) RenderWithin(ctx context.Context, lim Limits, r Request) (*renderer.Output, error) {
	r.Limits = lim.Size
	req, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding the render request: %w", err)
	}
	if err := p.slots.Acquire(ctx, lim.Concurrency); err != nil {
		return nil, err
	}
	defer p.slots.Release()
	return p.run(ctx, lim, req)
}

// MaxResponseBytes bounds what the parent reads from a worker (and the
// controller from the renderer service): the largest manifests an agent
// accepts, base64 in JSON, and room for an error.
const MaxResponseBytes = bundlecontent.MaxManifestBytes/3*4 + 1<<20

func (p *Pool) run(parent context.Context, lim Limits, req []byte) (*renderer.Output, error) {
	ctx, cancel := context.WithTimeout(parent, lim.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.exe)
	cmd.Env = []string{
		EnvVar + "=1",
		envMemoryLimit + "=" + strconv.FormatInt(lim.Memory, 10),
		envCPUSeconds + "=" + strconv.FormatInt(int64(2*lim.Timeout.Seconds())+1, 10),
		// One thread of Go code: a worker costs the controller at most
		// about one CPU.
		"GOMAXPROCS=1",
		// No programs to run: kustomize would find git and helm on PATH.
		"PATH=",
	}
	cmd.Stdin = bytes.NewReader(req)
	stdout := &cappedBuffer{limit: MaxResponseBytes}
	stderr := &cappedBuffer{limit: 8 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Its own process group, killed as a whole at the time limit.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second

	start := time.Now()
	runErr := cmd.Run()
	state := cmd.ProcessState
	if state == nil {
		return nil, fmt.Errorf("starting a render worker: %w", runErr)
	}
	var maxRSS int64
	if ru, ok := state.SysUsage().(*syscall.Rusage); ok {
		maxRSS = ru.Maxrss << 10
	}
	logr.FromContextOrDiscard(parent).V(1).Info("render worker done", "duration", time.Since(start).Round(time.Millisecond),
		"maxRSS", maxRSS, "exit", state.String())

	if state.Success() && !stdout.overflow {
		var resp Response
		if err := json.Unmarshal(stdout.Bytes(), &resp); err != nil {
			return nil, fmt.Errorf("reading the render worker's answer: %w", err)
		}
		if resp.Error != "" {
			return nil, &RenderError{Reason: resp.Reason, Message: resp.Error, MaxRSS: maxRSS}
		}
		return &renderer.Output{YAML: resp.YAML}, nil
	}
	if err := parent.Err(); err != nil {
		return nil, err // the caller gave up; nothing to say about the Bundle
	}
	fail := func(reason, msg string) error { return &RenderError{Reason: reason, Message: msg, MaxRSS: maxRSS} }
	timeout := fail(fleet.RenderTimeoutReason, fmt.Sprintf("rendering took longer than %s, the limit (bundleRenderTimeout): look for a template that loops "+
		"(range over a large number, include that recurses) or an overlay that does too much", lim.Timeout))
	outOfMemory := fail(fleet.RenderOutOfMemoryReason, fmt.Sprintf("rendering needed more than %s of memory, the limit (bundleRenderMemoryLimit): look for a template "+
		"that builds very large strings or lists, or values and files far larger than the clusters need", bundlefiles.FormatBytes(lim.Memory)))
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, timeout
	}
	ws, _ := state.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled() && ws.Signal() == syscall.SIGXCPU:
		return nil, timeout
	case ws.Signaled() && ws.Signal() == syscall.SIGKILL:
		// Not us (no timeout): the kernel's OOM killer, when the
		// container's memory runs out before the worker's own limit.
		return nil, outOfMemory
	case isOutOfMemory(stderr.String()):
		return nil, outOfMemory
	case stdout.overflow:
		return nil, fmt.Errorf("the render worker wrote more than %d bytes", MaxResponseBytes)
	}
	line := crashLine(stderr.String(), state)
	if strings.HasPrefix(line, "render worker: ") {
		return nil, errors.New(line) // the worker's own setup failed, not the Bundle
	}
	return nil, fail(fleet.RenderFailedReason, "the render worker crashed: "+line)
}

// isOutOfMemory reports whether a worker's stderr says the Go runtime could
// not get memory (the address space limit).
func isOutOfMemory(stderr string) bool {
	for _, s := range []string{"out of memory", "cannot allocate memory", "errno=12"} {
		if strings.Contains(stderr, s) {
			return true
		}
	}
	return false
}

// crashLine is the line of a crashed worker's stderr that says why (the Go
// runtime's "fatal error:" line), without stack traces.
func crashLine(stderr string, state *os.ProcessState) string {
	for _, line := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(line, "fatal error: ") || strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "render worker: ") {
			return strings.TrimSpace(line)
		}
	}
	return state.String()
}

// Slots bound how many renders run at once, to a limit that may change
// from one render to the next (the configuration is reloaded). The zero
// value is ready to use.
type Slots struct {
	mu      sync.Mutex
	running int
	freed   chan struct{} // closed (and replaced) whenever a slot is freed
}

// Acquire waits for a free slot, fewer than limit (at least 1) being taken,
// or for ctx to end.
func (s *Slots) Acquire(ctx context.Context, limit int) error {
	for {
		s.mu.Lock()
		if s.running < max(limit, 1) {
			s.running++
			s.mu.Unlock()
			return nil
		}
		if s.freed == nil {
			s.freed = make(chan struct{})
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Release frees a slot Acquire took.
func (s *Slots) Release() {
	s.mu.Lock()
	s.running--
	if s.freed != nil {
		close(s.freed)
		s.freed = nil
	}
	s.mu.Unlock()
}

// cappedBuffer keeps the first limit bytes written to it and drops the
// rest, so a worker can never make the parent hold more.
type cappedBuffer struct {
	bytes.Buffer
	limit    int
	overflow bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.Len(); len(p) > room {
		b.overflow = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
