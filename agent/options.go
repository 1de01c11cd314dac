// Package agent is the downstream agent (`fleet agent`): it registers its
// cluster with the upstream (the identity handshake of shared/SPEC.md §4),
// keeps its credential fresh, reports a heartbeat, and applies the
// BundleDeployments of its cluster. Several agents can run in one process
// (the benchmarks do), each with its own namespace and identity.
package agent

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// Options configure one agent.
type Options struct {
	// Local reaches the downstream cluster the agent runs in.
	Local *rest.Config
	// Namespace is the agent's namespace downstream (fleet-agent Secrets,
	// ConfigMap, leader election Lease).
	Namespace string
	// PodName identifies this replica (leader election, events).
	PodName string

	// CheckinInterval is the heartbeat interval.
	CheckinInterval time.Duration
	// Generation is the redeployAgentGeneration this agent was deployed
	// with, reported upstream.
	Generation *int64

	// LeaderElect elects one active replica per namespace (default in
	// `fleet agent`). LeaseDuration, RenewDeadline, RetryPeriod tune it.
	LeaderElect   bool
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	// RegistrationTimeout bounds the wait for the upstream's answer to one
	// registration request that cannot be read (deleted, or no answer from
	// the upstream) before a new request is made. One that can be read and
	// is not refused is waited for as long as it takes, with a log line
	// every RegistrationTimeout.
	RegistrationTimeout time.Duration

	// SystemCAs, when set, replaces the system trust store (tests).
	SystemCAs []byte

	// DisableDeployer runs registration and heartbeat only (benchmarks of
	// registration).
	DisableDeployer bool
	// Access runs the cluster-access side (docs/design/cluster-access.md) in every
	// replica, leader or not: a tunnel to the upstream's fleet-proxy and
	// the handler that serves users' requests as per-user impersonators.
	Access bool
	// CredentialPoll is how often a replica reads the stored credential
	// while it waits for one and to follow the leader's renewals (default
	// 10s). The replica that writes it starts at once.
	CredentialPoll time.Duration
	// TunnelDownLimit is how long the tunnel may stay down, once the
	// upstream serves the proxy API, before Run ends with an error so that
	// the process starts afresh (default 15m; negative: never).
	TunnelDownLimit time.Duration

	// Direct serves the authorized cluster endpoint (every replica) at
	// DirectAddress (default ":8443"): mode DirectMode ("agent", the
	// default, or "webhook"), reached by users at DirectURL, with
	// DirectHosts more names in its serving certificate. The revocation
	// list is read every DirectSyncInterval (default 10s). In mode webhook
	// the token webhook answers only for DirectAPIAudiences (default: the
	// local API server's own, asked of it).
	Direct             bool
	DirectMode         string
	DirectURL          string
	DirectHosts        []string
	DirectAddress      string
	DirectSyncInterval time.Duration
	DirectAPIAudiences []string

	// Registerer, when set, gets the agent's metrics (the access handler's
	// impersonator cache). Each access session registers its collectors
	// in place of the previous session's.
	Registerer prometheus.Registerer

	// ResyncInterval is how often applied BundleDeployments are checked for
	// drift and health (default 30s).
	ResyncInterval time.Duration
}

func (o *Options) defaults() error {
	if o.Local == nil {
		return errors.New("agent: no local cluster configuration")
	}
	if o.Namespace == "" {
		return errors.New("agent: no namespace")
	}
	if o.PodName == "" {
		h, _ := os.Hostname()
		o.PodName = h
	}
	if o.CheckinInterval <= 0 {
		o.CheckinInterval = time.Minute
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 30*time.Second, 25*time.Second, 10*time.Second
	}
	if o.CredentialPoll <= 0 {
		o.CredentialPoll = 10 * time.Second
	}
	if o.TunnelDownLimit == 0 {
		o.TunnelDownLimit = 15 * time.Minute
	}
	if o.DirectMode == "" {
		o.DirectMode = DirectModeAgent
	}
	if o.DirectMode != DirectModeAgent && o.DirectMode != DirectModeWebhook {
		return fmt.Errorf("agent: direct endpoint mode %q is not agent or webhook", o.DirectMode)
	}
	if o.DirectAddress == "" {
		o.DirectAddress = ":8443"
	}
	if o.DirectSyncInterval <= 0 {
		o.DirectSyncInterval = 10 * time.Second
	}
	if o.RegistrationTimeout <= 0 {
		o.RegistrationTimeout = 5 * time.Minute
	}
	return nil
}
