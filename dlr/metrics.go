package dlr

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Receipt outcomes (metrics label and Service.Count).
const (
	// OutRouted: matched and queued while a receiver of the account was
	// bound (delivered at once).
	OutRouted = "routed"
	// OutQueued: matched and queued with no receiver bound.
	OutQueued = "queued"
	// OutDuplicate: the same receipt (upstream, id, state) was queued
	// before; acknowledged upstream, not forwarded again.
	OutDuplicate = "duplicate"
	// OutUnmatched: no record matched; kept for reconciliation.
	OutUnmatched = "unmatched"
	// OutMatchedLater: a kept receipt matched its record on a later try.
	OutMatchedLater = "matched_later"
	// OutReconciled: a kept receipt settled an unknown record.
	OutReconciled = "reconciled"
	// OutStoreError: the store refused the receipt; the upstream got
	// ESME_RSYSERR and will send it again.
	OutStoreError = "store_error"
	// OutMalformed: the PDU could not be decoded.
	OutMalformed = "malformed"
	// OutMO: an MO message was queued for its account.
	OutMO = "mo"
	// OutMOUnroutable: an MO matched no mo_routes prefix and there is no
	// default_account; the upstream got ESME_RINVDSTADR.
	OutMOUnroutable = "mo_unroutable"
)

// Delivery outcomes towards ESMEs.
const (
	DelAcked     = "acked"
	DelRefused   = "refused"
	DelTimeout   = "timeout"
	DelLost      = "session_lost"
	DelAckFailed = "ack_store_error"
)

// metrics are the Prometheus metrics and the plain counters the tests and
// the admin API read.
type metrics struct {
	receipts   *prometheus.CounterVec
	deliveries *prometheus.CounterVec
	depth      *prometheus.GaugeVec

	counts sync.Map // outcome → *atomic.Uint64
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		receipts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "smppproxy", Subsystem: "receipts", Name: "total",
			Help: "deliver_sm/data_sm from upstreams by account (\"\" when none matched), upstream and outcome (routed, queued, duplicate, unmatched, matched_later, reconciled, store_error, malformed, mo, mo_unroutable).",
		}, []string{"account", "upstream", "outcome"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "smppproxy", Subsystem: "receipts", Name: "deliveries_total",
			Help: "deliver_sm (receipts and MO) sent to ESMEs by account and outcome (acked, refused, timeout, session_lost, ack_store_error).",
		}, []string{"account", "outcome"}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "smppproxy", Subsystem: "receipts", Name: "queue_depth",
			Help: "Receipts and MO waiting for an ESME acknowledgement, per account (expiry is counted at the next refresh, every minute).",
		}, []string{"account"}),
	}
	if reg != nil {
		reg.MustRegister(m.receipts, m.deliveries, m.depth)
	}
	return m
}

func (m *metrics) count(outcome string) { m.add(outcome, 1) }

// add counts n events of outcome; the counter is allocated only the first
// time an outcome is seen.
func (m *metrics) add(outcome string, n uint64) {
	v, ok := m.counts.Load(outcome)
	if !ok {
		v, _ = m.counts.LoadOrStore(outcome, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(n)
}

func (m *metrics) received(account, upstream, outcome string) {
	m.count(outcome)
	m.receipts.WithLabelValues(account, upstream, outcome).Inc()
}

func (m *metrics) delivered(account, outcome string) {
	m.count(outcome)
	m.deliveries.WithLabelValues(account, outcome).Inc()
}

// Count returns how many times outcome (an Out* or Del* label) happened.
func (s *Service) Count(outcome string) uint64 {
	if v, ok := s.m.counts.Load(outcome); ok {
		return v.(*atomic.Uint64).Load()
	}
	return 0
}
