package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// Options select the run.
type Options struct {
	// Quick is the CI smoke run: every scenario group small, about six
	// minutes on 2 cores (registration 1.5, rollout 1, fleet 2, gitops 0.5,
	// access 0.7).
	Quick bool
	// Clusters is the size of the scale scenario (default 50 quick, 1000).
	Clusters int
	// Shards is the number of controller shards (only 1 for now).
	Shards int
	// FleetBinary runs the controller process.
	FleetBinary string
	// Progress receives one line per step.
	Progress io.Writer
	// ProfileDir, when set, receives CPU and heap profiles of the
	// controllers taken during the scale scenario.
	ProfileDir string
	// AuditDir, when set, receives the audit logs (every request's
	// metadata and timestamps) of the registration group's upstream and
	// downstream API servers.
	AuditDir string
	// Only selects the groups to run: "registration" (render,
	// registration, scale, steady state, rollout), "rollout" (a staged
	// agent rollout), "fleet" (a large fleet's steady state and a Bundle
	// change reaching it, light agents), "access" (cluster access through
	// fleet-proxy), "gitops" (the source component: a monorepo's first
	// sync and a one-path commit, many GitRepos on one repository). Empty
	// runs all.
	Only []string
	// Tunnels is the size of the idle-tunnels scenario (default 1000,
	// 100 quick).
	Tunnels int
	// Render says where Bundles render: RenderRemote (the default, as the
	// chart installs it: a renderer process the controller reaches over
	// TLS) or RenderInPod (workers that are children of the controller).
	Render string
	// ControllerArgs are added to the controller's command line (tuning
	// flags such as --bundle-writers, to compare settings).
	ControllerArgs []string
}

// Where Bundles render (Options.Render).
const (
	RenderRemote = "remote"
	RenderInPod  = "in-pod"
)

func (o Options) renderMode() string {
	if o.Render == "" {
		return RenderRemote
	}
	return o.Render
}

// Groups are the values of Options.Only.
var Groups = []string{"registration", "access", "rollout", "fleet", "gitops"}

func (o Options) runs(group string) bool {
	return len(o.Only) == 0 || slices.Contains(o.Only, group)
}

// Run runs the selected scenarios and returns their results.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	for _, g := range opts.Only {
		if !slices.Contains(Groups, g) {
			return nil, fmt.Errorf("unknown scenario group %q (want one of %v)", g, Groups)
		}
	}
	if m := opts.renderMode(); m != RenderRemote && m != RenderInPod {
		return nil, fmt.Errorf("unknown render mode %q (want %s or %s)", m, RenderRemote, RenderInPod)
	}
	step := func(format string, args ...any) {
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
		}
	}
	var results []Result
	if opts.runs("registration") {
		rs, err := runRegistration(ctx, opts, step)
		results = append(results, rs...)
		if err != nil {
			return results, err
		}
	}
	if opts.runs("rollout") {
		rs, err := runAgentRollout(ctx, opts, step)
		results = append(results, rs...)
		if err != nil {
			return results, err
		}
	}
	if opts.runs("fleet") {
		rs, err := runFleetScale(ctx, opts, step)
		results = append(results, rs...)
		if err != nil {
			return results, err
		}
	}
	if opts.runs("gitops") {
		rs, err := runGitOps(ctx, opts, step)
		results = append(results, rs...)
		if err != nil {
			return results, err
		}
	}
	if opts.runs("access") {
		rs, err := runAccess(ctx, opts, step)
		results = append(results, rs...)
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

// runRegistration runs the registration scenarios on their own control
// planes and controller, stopped before anything else runs.
func runRegistration(ctx context.Context, opts Options, step func(string, ...any)) ([]Result, error) {
	// Full mode measures at the product's default heartbeat interval (1m).
	latencyN, downstreams, window, renders, heartbeat := 20, 3, 2*time.Minute, 1000, time.Minute
	rollout := []int{1, 10, 50}
	if opts.Quick {
		latencyN, downstreams, window, renders, heartbeat = 5, 2, 20*time.Second, 200, 5*time.Second
		rollout = []int{1, 5}
	}
	if opts.Clusters == 0 {
		opts.Clusters = 1000
		if opts.Quick {
			opts.Clusters = 50
		}
	}
	var results []Result

	step("render: %d agent renders", renders)
	r, err := renderScenario(renders)
	if err != nil {
		return results, err
	}
	results = append(results, r)

	step("starting an upstream and %d downstream control planes and %d controller shard(s)", downstreams, max(1, opts.Shards))
	h, err := startHarness(ctx, downstreams, heartbeat, opts.Shards, opts)
	if err != nil {
		return results, err
	}
	defer h.stop()

	step("agent-initiated: %d registrations, one at a time", latencyN)
	if r, err = h.agentInitiated(ctx, latencyN, opts.Progress); err != nil {
		return results, fmt.Errorf("agent-initiated: %w (controller log: %s)", err, h.ctrlLog)
	}
	results = append(results, r)

	step("manager-initiated: %d clusters, one at a time", latencyN)
	if r, err = h.managerInitiated(ctx, latencyN); err != nil {
		return results, fmt.Errorf("manager-initiated: %w", err)
	}
	results = append(results, r)

	step("ready-to-connected: %d agent-initiated registrations with cluster access, fleet-proxy started for them", latencyN)
	if r, err = h.readyToConnected(ctx, latencyN, opts.FleetBinary); err != nil {
		return results, fmt.Errorf("ready-to-connected: %w (controller log: %s)", err, h.ctrlLog)
	}
	results = append(results, r)

	as := &agents{}
	defer as.stopAll()
	step("scale: %d agent-initiated registrations at once", opts.Clusters)
	r, _, err = h.scale(ctx, opts.Clusters, as, opts.ProfileDir)
	if err != nil {
		return results, fmt.Errorf("scale: %w", err)
	}
	results = append(results, r)

	step("steady-state: %d clusters reporting every %s, measured for %s after settling for one interval", opts.Clusters, heartbeat, window)
	if r, err = h.steadyState(ctx, opts.Clusters, window); err != nil {
		return results, fmt.Errorf("steady-state: %w", err)
	}
	results = append(results, r)
	as.stopAll()

	step("bundle-rollout: a Bundle change reaching Ready on %v clusters", rollout)
	rs, err := h.bundleRollout(ctx, rollout)
	results = append(results, rs...)
	if err != nil {
		return results, fmt.Errorf("bundle-rollout: %w", err)
	}
	return results, nil
}
