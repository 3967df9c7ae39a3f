package dedup

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the engine's Prometheus metrics, registered on an injected
// Registerer so several proxies can live in one process.
type Metrics struct {
	submits *prometheus.CounterVec
}

// NewMetrics registers the engine metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		submits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "smppproxy", Subsystem: "dedup", Name: "submits_total",
			Help: "submit_sm decisions by account and outcome (forwarded, replayed, joined, conflict, unknown, rejected, throttled, untracked, retryable, invalid, store_error).",
		}, []string{"account", "outcome"}),
	}
	reg.MustRegister(m.submits)
	return m
}

func (m *Metrics) submit(account, outcome string) {
	if m == nil {
		return
	}
	m.submits.WithLabelValues(account, outcome).Inc()
}
