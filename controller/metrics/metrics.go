// Package metrics defines the controller's Prometheus metrics, registered
// with controller-runtime's registry (served on --metrics-address beside the
// reconcile metrics controller-runtime already exports).
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// RegistrationSteps counts registration steps by step and result.
	RegistrationSteps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_registration_steps_total",
		Help: "Registration steps by step (import, token, grant, ...) and result (success, error, waiting).",
	}, []string{"step", "result"})

	// AgentDeploys counts agent deploys to manager-initiated clusters by why
	// they happened.
	AgentDeploys = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_agent_deploys_total",
		Help: "Agent deploys pushed by the controller, by reason (first, generation, settings, server).",
	}, []string{"reason"})

	// AgentDeployDuration observes how long a push of the agent took.
	AgentDeployDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fleet_agent_deploy_duration_seconds",
		Help:    "Time to render and server-side apply the agent to a downstream cluster.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
	})
)

// Bundle renders (render workers).
var (
	// BundleRenders counts Bundle renders by result: success, the Stalled
	// reason of a Bundle that does not render, or error (no worker).
	BundleRenders = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_bundle_renders_total",
		Help: "Bundle renders in render workers, by result (success, RenderFailed, BundleTooLarge, RemoteResourceRefused, RenderTimeout, RenderOutOfMemory, error).",
	}, []string{"result"})

	// BundleRenderDuration observes how long a render took, waiting for a
	// free worker included.
	BundleRenderDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fleet_bundle_render_duration_seconds",
		Help:    "Time to render a Bundle in a render worker, waiting for a free worker included.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
	})
)

// Staged agent rollouts (the current revision's AgentRollout).
var (
	// AgentRolloutClusters counts the planned Clusters of the current
	// rollout by state.
	AgentRolloutClusters = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleet_agent_rollout_clusters",
		Help: "Clusters planned in the current agent rollout, by state (updated, pending, failed).",
	}, []string{"state"})
	// AgentRolloutWave is the wave in progress (waves done), out of
	// AgentRolloutWaves.
	AgentRolloutWave = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleet_agent_rollout_wave",
		Help: "Waves of the current agent rollout that are done.",
	})
	AgentRolloutWaves = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleet_agent_rollout_waves",
		Help: "Waves in the plan of the current agent rollout.",
	})
	// AgentRolloutHalted is 1 while the current rollout is halted.
	AgentRolloutHalted = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleet_agent_rollout_halted",
		Help: "1 while the current agent rollout is halted (a wave missed its deadline), else 0.",
	})
)

func init() {
	crmetrics.Registry.MustRegister(RegistrationSteps, AgentDeploys, AgentDeployDuration, BundleRenders, BundleRenderDuration,
		AgentRolloutClusters, AgentRolloutWave, AgentRolloutWaves, AgentRolloutHalted, clusters)
}
