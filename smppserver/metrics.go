package smppserver

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics exports a Server to Prometheus (subsystem "esme"). It is a
// prometheus.Collector: live sessions, recovered panics and unanswered
// requests are read from the Server at scrape time; sessions closed by
// reason are counted by SessionClosed, which the caller wires to
// Server.OnSession. Register it on an injected Registerer.
type Metrics struct {
	srv       *Server
	sessions  *prometheus.Desc
	inFlight  *prometheus.Desc
	panics    *prometheus.Desc
	unwritten *prometheus.Desc
	closed    *prometheus.CounterVec
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics returns the collector for s. Every reason a bound session can
// close with starts at 0, so that rate() works from the first scrape.
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
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "smppproxy", Subsystem: "esme", Name: "sessions_closed_total",
			Help: "Bound ESME sessions that ended, by close reason.",
		}, []string{"reason"}),
	}
	for r := range reasonNames {
		// OnSession reports bound sessions only: these never occur.
		if r := CloseReason(r); r != ReasonNone && r != ReasonBindTimeout && r != ReasonBindFailed {
			m.closed.WithLabelValues(r.String())
		}
	}
	return m
}

// SessionClosed counts ss under its CloseReason. Call it from
// Server.OnSession with up=false.
func (m *Metrics) SessionClosed(ss *Session) {
	m.closed.WithLabelValues(ss.CloseReason().String()).Inc()
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.sessions
	ch <- m.inFlight
	ch <- m.panics
	ch <- m.unwritten
	m.closed.Describe(ch)
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
	m.closed.Collect(ch)
}
