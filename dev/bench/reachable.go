package bench

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/agent"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/proxy"
)

// readyToConnected: agents with cluster access on register one at a time
// (agent-initiated, fleet-proxy as a separate process behind the
// registration harness's upstream); each sample is how long after the
// Cluster was first seen Ready it was first seen Connected (zero when
// Connected came first). A user who reads Ready and goes through the
// manager at once is served only when this is zero.
func (h *harness) readyToConnected(ctx context.Context, n int, fleetBin string) (Result, error) {
	r := Result{Name: "ready-to-connected", Count: n, Goal: "Connected <= 1 s after Ready (max)"}
	ae, err := newAccessEnv(ctx, h.env, fleetBin, false)
	if err != nil {
		return r, fmt.Errorf("starting fleet-proxy: %w", err)
	}
	defer func() {
		ae.stop()
		// The other scenarios run without fleet-proxy: an APIService
		// nobody serves would fail the upstream's discovery.
		svc := &unstructured.Unstructured{}
		svc.SetAPIVersion("apiregistration.k8s.io/v1")
		svc.SetKind("APIService")
		svc.SetName(proxy.APIServiceName)
		_ = client.IgnoreNotFound(h.env.Upstream.Client.Delete(context.Background(), svc))
	}()
	if err := ae.waitServed(ctx); err != nil {
		return r, err
	}
	v, cw, err := h.watchedWorkspace(ctx, "bench-reachable")
	if err != nil {
		return r, err
	}
	connected := func(cw *clusterWatch) map[string]time.Time { return cw.connected }
	as := &agents{}
	defer as.stopAll()
	var samples, toReady []time.Duration
	first := 0
	for i := 0; i < n; i++ {
		ds := h.env.Downstreams[i%len(h.env.Downstreams)]
		clientID := fmt.Sprintf("rc-%d", i)
		ns := fmt.Sprintf("bench-rc-%d", i)
		if err := installBootstrap(ctx, ds, ns, v, clientID); err != nil {
			return r, err
		}
		start := time.Now()
		if _, err := as.run(agent.Options{Local: ds.Config, Namespace: ns, PodName: ns, CheckinInterval: h.heartbeat,
			RegistrationTimeout: 5 * time.Minute, DisableDeployer: true, Access: true}); err != nil {
			return r, err
		}
		name := names.AutoClusterName(clientID)
		ready, err := cw.wait(ctx, true, []string{name}, time.Minute)
		if err != nil {
			return r, fmt.Errorf("cluster %s not Ready: %w", name, err)
		}
		conn, err := cw.waitFor(ctx, connected, []string{name}, time.Minute)
		if err != nil {
			return r, fmt.Errorf("cluster %s not Connected: %w (fleet-proxy log: %s)", name, err, ae.proxyLog)
		}
		gap := conn[name].Sub(ready[name])
		if gap <= 0 {
			first++
			gap = 0
		}
		samples = append(samples, gap)
		toReady = append(toReady, ready[name].Sub(start))
	}
	r.latencies(samples)
	r.Notes = fmt.Sprintf("from the Cluster first seen Ready to first seen Connected (agents with cluster access, fleet-proxy behind the upstream); Connected came first for %d of %d; p50 from agent start to Ready %.1f ms",
		first, n, median(toReady))
	return r, nil
}
