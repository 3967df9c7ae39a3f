package smppserver

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics exports a Server to Prometheus (subsystem "esme"). It is a
// prometheus.Collector: live sessions, recovered panics and unanswered
// requests, sessions closed by reason, open connections and connections
// refused at accept by reason are read from the Server at scrape time.
// Register it on an injected Registerer.
type Metrics struct {
	srv       *Server
	sessions  *prometheus.Desc
	inFlight  *prometheus.Desc
	panics    *prometheus.Desc
	unwritten *prometheus.Desc
	closed    *prometheus.Desc
	refused   *prometheus.Desc
	open      *prometheus.Desc
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics returns the collector for s. Every close reason is exported
// from 0, so that rate() works from the first scrape.
func NewMetrics(s *Server) *Metrics {
	m := &Metrics{
		srv: s,
		sessions: prometheus.NewDesc("smppproxy_esme_sessions",
			"Live ESME sessions by account and bind type (TX, RX, TRX; unbound sessions have account \"\").",
			[]string{"account", "bind"}, nil),
		inFlight: prometheus.NewDesc("smppproxy_esme_in_flight",
			"Requests being handled for ESME sessions, by account.",
			[]string{"account"}, nil),
		panics: prometheus.NewDesc("smppproxy_esme_panics_total",
			"Panics in request handlers and the authenticator that were recovered.", nil, nil),
		unwritten: prometheus.NewDesc("smppproxy_esme_unanswered_total",
			"Requests answered ESME_RSYSERR by the server because their handler wrote nothing (panics included).", nil, nil),
		closed: prometheus.NewDesc("smppproxy_esme_sessions_closed_total",
			"ESME sessions that ended, by close reason (bind_timeout and bind_failed never bound).",
			[]string{"reason"}, nil),
		refused: prometheus.NewDesc("smppproxy_esme_connections_refused_total",
			"ESME connections closed at accept because a cap was reached, by reason (max_connections, max_connections_per_ip).",
			[]string{"reason"}, nil),
		open: prometheus.NewDesc("smppproxy_esme_connections",
			"Open ESME connections, bound or not, as counted against listen.max_connections.", nil, nil),
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.sessions
	ch <- m.inFlight
	ch <- m.panics
	ch <- m.unwritten
	ch <- m.closed
	ch <- m.refused
	ch <- m.open
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	type group struct{ account, bind string }
	count := map[group]int{}
	inflight := map[string]int{}
	for _, ss := range m.srv.Sessions() {
		g := group{ss.Account(), ss.BindType().String()}
		count[g]++
		inflight[g.account] += ss.InFlight()
	}
	for g, n := range count {
		ch <- prometheus.MustNewConstMetric(m.sessions, prometheus.GaugeValue, float64(n), g.account, g.bind)
	}
	for acc, n := range inflight {
		ch <- prometheus.MustNewConstMetric(m.inFlight, prometheus.GaugeValue, float64(n), acc)
	}
	ch <- prometheus.MustNewConstMetric(m.panics, prometheus.CounterValue, float64(m.srv.Panics()))
	ch <- prometheus.MustNewConstMetric(m.unwritten, prometheus.CounterValue, float64(m.srv.Unwritten()))
	for r, n := range m.srv.ClosedCounts() {
		ch <- prometheus.MustNewConstMetric(m.closed, prometheus.CounterValue, float64(n), r.String())
	}
	for r, n := range m.srv.RefusedCounts() {
		ch <- prometheus.MustNewConstMetric(m.refused, prometheus.CounterValue, float64(n), r)
	}
	ch <- prometheus.MustNewConstMetric(m.open, prometheus.GaugeValue, float64(m.srv.OpenConnections()))
}
