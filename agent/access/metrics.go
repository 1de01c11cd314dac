package access

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the impersonator cache. The labels are bounded: no user name
// is a label (the set of users is not).
type metrics struct {
	tokenRequests *prometheus.CounterVec
	collected     prometheus.Counter
	// Of the direct endpoint: requests served (and token reviews
	// answered yes), requests refused.
	directRequests prometheus.Counter
	directRefused  prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		tokenRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_agent_impersonator_token_requests_total",
			Help: "TokenRequests made for impersonators' ServiceAccounts, by result (success, error).",
		}, []string{"result"}),
		collected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_agent_impersonators_collected_total",
			Help: "Impersonators removed because they went unused.",
		}),
		directRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_agent_direct_requests_total",
			Help: "Requests the direct endpoint served (and token reviews it authenticated).",
		}),
		directRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_agent_direct_refused_total",
			Help: "Requests and token reviews the direct endpoint refused (invalid, expired, revoked token, or a verb it does not carry).",
		}),
	}
}

// registerDirect puts the direct endpoint's metrics on reg (the
// impersonator metrics come from the tunnel's handler).
func (x *metrics) registerDirect(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{x.directRequests, x.directRefused} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// register puts the metrics and a gauge of the impersonators m knows on
// reg.
func (x *metrics) register(reg prometheus.Registerer, m *impersonators) error {
	known := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fleet_agent_impersonators",
		Help: "Impersonators (one per upstream user) this agent process knows: made or used since it started.",
	}, func() float64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		return float64(len(m.entries))
	})
	for _, c := range []prometheus.Collector{known, x.tokenRequests, x.collected} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
