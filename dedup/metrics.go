package dedup

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the engine's Prometheus metrics, registered on an injected
// Registerer so several proxies can live in one process.
type Metrics struct {
	submits  *prometheus.CounterVec
	resolved *prometheus.CounterVec
	// settled counts the settled records a decision found, by where:
	// its memory of recent answers, or the store.
	settled    *prometheus.CounterVec
	fromMemory prometheus.Counter
	fromStore  prometheus.Counter
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
	m.settled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "smppproxy", Subsystem: "dedup", Name: "settled_lookups_total",
		Help: "settled records (accepted or rejected) a submit's decision found under its key, by source: memory (the proxy's memory of recent answers, store.recent_answers) or store (read, or found by a create).",
	}, []string{"source"})
	m.fromMemory, m.fromStore = m.settled.WithLabelValues("memory"), m.settled.WithLabelValues("store")
	reg.MustRegister(m.submits, m.resolved, m.settled)
	return m
}

// settledFound counts a settled record a decision found, in memory or
// in the store.
func (m *Metrics) settledFound(inMemory bool) {
	if m == nil {
		return
	}
	if inMemory {
		m.fromMemory.Inc()
	} else {
		m.fromStore.Inc()
	}
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
