// Package renderservice renders Bundles outside the controller's pod. The
// renderer (`fleet renderer`, Deployment fleet-renderer) serves render
// requests over TLS to the one caller holding the bearer token, the
// controller, and runs each render in a render worker of its own
// (internal/renderworker) within the limits the request carries. The
// controller's Client sends them. The renderer holds no Kubernetes
// credential (it refuses to start with one mounted) and needs no network
// beyond its listening port, so a Bundle author whose template escapes a
// worker holds neither.
//
// The wire format is the render worker's: the body of POST RenderPath is a
// renderworker.Request with the time, memory and concurrency limits added;
// the answer is a renderworker.Response with the worker's peak memory. A
// Bundle's failure (RenderTimeout, BundleTooLarge, ...) is a 200 answer
// with a reason, so it reaches the controller as the same
// *renderworker.RenderError an in-pod worker gives; any other status is the
// renderer's own trouble.
package renderservice

import (
	"fmt"
	"time"

	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/renderworker"
)

const (
	// RenderPath renders one Bundle (POST, bearer token).
	RenderPath = "/v1/render"
	// HealthPath and ReadyPath are the probes (GET, no token: they say
	// nothing but "ok").
	HealthPath = "/healthz"
	ReadyPath  = "/readyz"

	// minRequestBytes is the least a request body may be, whatever
	// bundleMaxSize says.
	minRequestBytes = 64 << 20
)

// MaxRequestBytes bounds a render request's body for a controller whose
// bundleMaxSize is bundleMaxSize (zero: the default): a Bundle's resources
// are no longer bounded by one API object (spec.contentsId), only by
// bundleMaxSize once decoded, and their JSON may take up to about twice
// that (escapes); 16 MiB more is room for values and options. Never less
// than 64 MiB.
func MaxRequestBytes(bundleMaxSize int64) int64 {
	if bundleMaxSize <= 0 {
		bundleMaxSize = config.DefaultBundleMaxSize
	}
	return max(minRequestBytes, 2*bundleMaxSize+16<<20)
}

// request is the body of POST RenderPath.
type request struct {
	renderworker.Request
	// Bounds are the time, memory and concurrency limits of the
	// controller's configuration (the size limits are in Request).
	Bounds bounds `json:"bounds"`
}

type bounds struct {
	// Timeout is a Go duration ("30s").
	Timeout string `json:"timeout"`
	// Memory is in bytes.
	Memory int64 `json:"memory"`
	// Concurrency is how many renders of this caller may run at once.
	Concurrency int `json:"concurrency"`
}

func boundsOf(l renderworker.Limits) bounds {
	return bounds{Timeout: l.Timeout.String(), Memory: l.Memory, Concurrency: l.Concurrency}
}

// limits returns the limits a request renders within: those it carries,
// the defaults for those it leaves out, and at most maxConcurrency workers.
func (r *request) limits(maxConcurrency int) (renderworker.Limits, error) {
	lim := renderworker.LimitsOf(&config.Config{})
	if r.Request.Limits.Resource > 0 {
		lim.Size.Resource = r.Request.Limits.Resource
	}
	if r.Request.Limits.Total > 0 {
		lim.Size.Total = r.Request.Limits.Total
	}
	if r.Bounds.Timeout != "" {
		d, err := time.ParseDuration(r.Bounds.Timeout)
		if err != nil || d <= 0 {
			return lim, fmt.Errorf("bounds.timeout %q is not a positive duration", r.Bounds.Timeout)
		}
		lim.Timeout = d
	}
	switch {
	case r.Bounds.Memory < 0:
		return lim, fmt.Errorf("bounds.memory %d is negative", r.Bounds.Memory)
	case r.Bounds.Memory > 0:
		lim.Memory = r.Bounds.Memory
	}
	if r.Bounds.Concurrency > 0 {
		lim.Concurrency = r.Bounds.Concurrency
	}
	if maxConcurrency > 0 {
		lim.Concurrency = min(lim.Concurrency, maxConcurrency)
	}
	return lim, nil
}

// response is the answer to a render: manifests, or the Bundle's failure.
type response struct {
	renderworker.Response
	// MaxRSS is the worker's peak resident memory in bytes.
	MaxRSS int64 `json:"maxRSS,omitempty"`
	// ValuesResolved: the renderer computed the Helm values per cluster
	// (request values). A renderer older than that ignores them, and its
	// manifests are not taken.
	ValuesResolved bool `json:"valuesResolved,omitempty"`
}
