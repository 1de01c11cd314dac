// Package renderworker renders Bundles — their authors' Helm charts,
// kustomize overlays and manifests — in child processes of the controller,
// so that a Bundle that loops, eats memory or tries to reach the network
// costs one bounded worker, never the controller.
//
// A worker is the running binary itself, started with EnvVar set.
// ServeIfWorker, called first thing in main (and in TestMain of test binaries
// that render through a Pool), turns the process into a worker: it limits
// its own memory and CPU time, cuts itself off from the network and from
// other programs, renders one request read from stdin (JSON) and writes the
// result to stdout (JSON). The Pool in the parent bounds how many run at
// once and kills a worker's process group at the time limit.
package renderworker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/bundlefiles"
)

const (
	// EnvVar, set to "1", makes the process a render worker.
	EnvVar = "FLEET_RENDER_WORKER"
	// envMemoryLimit is the worker's memory limit in bytes.
	envMemoryLimit = "FLEET_RENDER_MEMORY_LIMIT"
	// envCPUSeconds is the worker's CPU time limit (RLIMIT_CPU), a backstop
	// for the parent's wall-clock limit should the parent be gone.
	envCPUSeconds = "FLEET_RENDER_CPU_SECONDS"

	// addressSpaceSlack is added to the memory limit for the address space
	// limit: the Go runtime reserves heap address space in 64 MiB arenas.
	addressSpaceSlack = 64 << 20
)

// Request is a render: what the Pool writes to a worker's stdin, and the
// body of a request to the renderer service (internal/renderservice, with
// the limits added).
type Request struct {
	Name      string                        `json:"name"`
	Resources []fleet.BundleResource        `json:"resources,omitempty"`
	Options   fleet.BundleDeploymentOptions `json:"options"`
	Limits    bundlefiles.SizeLimits        `json:"limits"`
	// Values are the per-cluster inputs of the Helm values: the part of
	// the target cluster its `${ }` templates read, the valuesFrom
	// content (renderer.ResolveValues runs here, in the worker).
	Values *renderer.ClusterValues `json:"values,omitempty"`
}

// Response is a worker's answer on stdout: manifests, or the failure and
// its Bundle condition reason.
type Response struct {
	YAML   []byte `json:"yaml,omitempty"`
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
}

// ServeIfWorker makes this process a render worker when EnvVar is set: it
// renders one request from stdin to stdout and exits. Otherwise it returns at
// once. Call it before anything else in main, and in TestMain of test
// binaries that render through a Pool (the Pool starts the running binary).
func ServeIfWorker() {
	if os.Getenv(EnvVar) == "" {
		return
	}
	os.Exit(serve(os.Stdin, os.Stdout))
}

// serve is the worker's main; it returns the exit code.
func serve(in io.Reader, out io.Writer) int {
	memory, _ := strconv.ParseInt(os.Getenv(envMemoryLimit), 10, 64)
	cpuSeconds, _ := strconv.ParseUint(os.Getenv(envCPUSeconds), 10, 64)
	if err := limitSelf(memory, cpuSeconds); err != nil {
		fmt.Fprintf(os.Stderr, "render worker: %v\n", err)
		return 1
	}
	isolate()
	var req Request
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		fmt.Fprintf(os.Stderr, "render worker: reading the request: %v\n", err)
		return 1
	}
	resp := render(req)
	w := bufio.NewWriter(out)
	if err := json.NewEncoder(w).Encode(resp); err != nil {
		fmt.Fprintf(os.Stderr, "render worker: writing the result: %v\n", err)
		return 1
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(os.Stderr, "render worker: writing the result: %v\n", err)
		return 1
	}
	return 0
}

// render is what the controller used to do in-process: decode the
// resources within the size limits, render, and refuse manifests larger
// than an agent accepts.
func render(req Request) (resp Response) {
	defer func() {
		if r := recover(); r != nil {
			resp = Response{Reason: fleet.RenderFailedReason, Error: fmt.Sprintf("internal error while rendering: %v", r)}
		}
	}()
	files, err := bundlefiles.DecodeWithin(req.Resources, req.Limits)
	if err != nil {
		return failure(err)
	}
	var values renderer.ClusterValues
	if req.Values != nil {
		values = *req.Values
	}
	opts, err := renderer.ResolveValues(req.Options, values)
	if err != nil {
		return failure(fmt.Errorf("bundle %s: %w", req.Name, err))
	}
	out, err := renderer.RenderFiles(req.Name, files, opts)
	if err != nil {
		return failure(err)
	}
	if len(out.YAML) > bundlecontent.MaxManifestBytes {
		return failure(&bundlefiles.TooLargeError{Limit: bundlecontent.MaxManifestBytes})
	}
	return Response{YAML: out.YAML}
}

func failure(err error) Response {
	return Response{Reason: renderer.ReasonOf(err), Error: err.Error()}
}

// limitSelf bounds the worker's memory: a soft limit that makes the garbage
// collector work harder near it, and an address space limit above it that
// makes the runtime fail with "out of memory" instead of growing further.
// The address space limit counts from what the process has mapped now (the
// binary, the runtime's reservations), so it bounds what rendering adds.
func limitSelf(memory int64, cpuSeconds uint64) error {
	// Should the container's memory run out anyway, the kernel kills a
	// worker, not the controller. Raising one's own score needs no
	// privilege.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	if memory > 0 {
		debug.SetMemoryLimit(memory)
		mapped, err := mappedBytes()
		if err != nil {
			return err
		}
		as := uint64(mapped + memory + addressSpaceSlack)
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: as, Max: as}); err != nil {
			return fmt.Errorf("limiting the address space: %w", err)
		}
	}
	if cpuSeconds > 0 {
		// SIGXCPU at the soft limit, SIGKILL one second later.
		if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: cpuSeconds, Max: cpuSeconds + 1}); err != nil {
			return fmt.Errorf("limiting CPU time: %w", err)
		}
	}
	return nil
}

// mappedBytes is the process's virtual memory size (VmSize).
func mappedBytes() (int64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range bytes.Split(status, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmSize:")); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("reading VmSize: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmSize in /proc/self/status")
}

// isolate cuts the worker off from the network and from other programs.
// kustomize's loader fetches http(s) resources with Go's default HTTP
// transport and clones git repositories with the git program it finds on
// PATH, whatever filesystem it was given; the overlay check refuses such
// overlays first, and this makes sure nothing that slipped through can
// fetch. Helm renders client-only with DNS lookups off.
func isolate() {
	http.DefaultTransport = refuseTransport{}
	_ = os.Setenv("PATH", "")
}

// errNoNetwork is what any HTTP request in a worker gets.
var errNoNetwork = errors.New("render workers have no network access: Bundles may only use their own files")

type refuseTransport struct{}

func (refuseTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, errNoNetwork }
