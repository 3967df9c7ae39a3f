package dedup

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the engine's Prometheus metrics, registered on an injected
// Registerer so several proxies can live in one process.
type Metrics struct {
	submits  *prometheus.CounterVec
	resolved *prometheus.CounterVec
}

// NewMetrics registers the engine metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		submits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "smppproxy", Subsystem: "dedup", Name: "submits_total",
			Help: "submit_sm decisions by account and outcome (forwarded, replayed, joined, conflict, unknown, rejected, throttled, untracked, retryable, invalid, store_error, owner_dead).",
		}, []string{"account", "outcome"}),
	}
	m.resolved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "smppproxy", Subsystem: "dedup", Name: "resolved_total",
		Help: "unknown records resolved, by account and resulting state.",
	}, []string{"account", "state"})
	reg.MustRegister(m.submits, m.resolved)
	return m
}

func (m *Metrics) submit(account, outcome string) {
	if m == nil {
		return
	}
	m.submits.WithLabelValues(account, outcome).Inc()
}

func (m *Metrics) resolve(account, st string) {
	if m == nil {
		return
	}
	m.resolved.WithLabelValues(account, st).Inc()
}
