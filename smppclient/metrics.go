package smppclient

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/smpp"
)

// Metrics exports upstream pools to Prometheus (subsystem "upstream"). It is
// a prometheus.Collector: the pools' counters and sessions are read from
// Stats and Sessions at scrape time; request latency and responses by
// status are observed by the pools returned by Instrument. Register it on
// an injected Registerer.
type Metrics struct {
	mu    sync.Mutex // guards pools and retired (Add, Remove)
	pools []*Pool
	// retired: the counters of the pools a reload replaced, by upstream,
	// so that the upstream's counters never go down.
	retired map[string]Stats

	latency   *prometheus.HistogramVec
	responses *prometheus.CounterVec

	sessions, inFlight                                 *prometheus.Desc
	binds, bindFailures, written, failed, late, closed *prometheus.Desc
	deliveries, deliverRefused, deliverPanics, enquire *prometheus.Desc
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics returns the collector for pools.
func NewMetrics(pools ...*Pool) *Metrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("smppproxy_upstream_"+name, help, append([]string{"upstream"}, labels...), nil)
	}
	return &Metrics{
		pools:   slices.Clone(pools), // the caller's slice is its own
		retired: map[string]Stats{},
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "smppproxy", Subsystem: "upstream", Name: "request_seconds",
			Help:    "Time from writing a request to an upstream to its response, by upstream (answered requests only).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15), // 1ms … 16s
		}, []string{"upstream"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "smppproxy", Subsystem: "upstream", Name: "responses_total",
			Help: "Responses to forwarded requests by upstream and SMPP status name (\"other\" for a status outside the SMPP status table).",
		}, []string{"upstream", "status"}),
		sessions:       d("sessions", "Upstream binds by upstream, bind type and state (connecting, bound).", "bind", "state"),
		inFlight:       d("in_flight", "Requests written to the upstream and not yet answered."),
		binds:          d("binds_total", "Successful binds."),
		bindFailures:   d("bind_failures_total", "Failed dial, TLS or bind attempts."),
		written:        d("requests_written_total", "Requests written to the upstream."),
		failed:         d("requests_failed_total", "Requests without an upstream answer, by reason (timeout, session_lost and bad_answer, an acceptance with an overlong message id, are ambiguous; the others were not sent).", "reason"),
		late:           d("late_responses_total", "Responses dropped for having no request waiting: after their request had timed out (late acceptances with an overlong message id included), or before its frame was written."),
		closed:         d("sessions_closed_total", "Upstream sessions closed, by reason.", "reason"),
		deliveries:     d("deliveries_total", "deliver_sm and data_sm received from the upstream."),
		deliverRefused: d("deliveries_refused_total", "deliver_sm and data_sm answered ESME_RTHROTTLED because the upstream's delivery window (deliver_window) was full."),
		deliverPanics:  d("delivery_panics_total", "Panics in the delivery handler that were recovered."),
		enquire:        d("enquire_links_total", "enquire_link requests sent."),
	}
}

// Instrument returns p with Submit observed by m: the latency from the
// moment the request is about to be written (after the journal) to its
// response, and the response's status. Every other method is p's.
func (m *Metrics) Instrument(p *Pool) *InstrumentedPool {
	return &InstrumentedPool{Pool: p, m: m, latency: m.latency.WithLabelValues(p.Name()),
		ok: m.responses.WithLabelValues(p.Name(), statusLabel(smpp.StatusOK))}
}

// InstrumentedPool is a Pool whose Submit is observed by a Metrics.
type InstrumentedPool struct {
	*Pool
	m *Metrics
	// the upstream's latency histogram and its count of ESME_ROK
	// responses, looked up once
	latency prometheus.Observer
	ok      prometheus.Counter
}

// Submit is Pool.Submit, observed.
func (ip *InstrumentedPool) Submit(ctx context.Context, prefer string, build func(seq uint32) []byte, beforeWrite func(session string, seq uint32) error) (Response, error) {
	var written time.Time
	resp, err := ip.Pool.Submit(ctx, prefer, build, func(session string, seq uint32) error {
		if beforeWrite != nil {
			if err := beforeWrite(session, seq); err != nil {
				return err
			}
		}
		written = time.Now()
		return nil
	})
	if err == nil {
		if !written.IsZero() {
			ip.latency.Observe(time.Since(written).Seconds())
		}
		if resp.Status == smpp.StatusOK {
			ip.ok.Inc()
		} else {
			ip.m.responses.WithLabelValues(ip.Name(), statusLabel(resp.Status)).Inc()
		}
	}
	return resp, err
}

// statusLabel is the metric label value of an SMPP status: its name when it
// is in the status table, else "other", so that an SMSC answering with
// arbitrary codes cannot grow a metric's label set.
func statusLabel(s smpp.Status) string {
	if s.Known() {
		return s.String()
	}
	return "other"
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.latency.Describe(ch)
	m.responses.Describe(ch)
	for _, d := range []*prometheus.Desc{m.sessions, m.inFlight, m.binds, m.bindFailures, m.written, m.failed,
		m.late, m.closed, m.deliveries, m.deliverRefused, m.deliverPanics, m.enquire} {
		ch <- d
	}
}

// Add exports p too (an upstream added by a configuration reload).
func (m *Metrics) Add(p *Pool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pools = append(m.pools, p)
}

// Remove stops exporting p (an upstream replaced or removed by a reload,
// once closed).
func (m *Metrics) Remove(p *Pool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.pools, p) {
		return
	}
	m.pools = slices.DeleteFunc(m.pools, func(q *Pool) bool { return q == p })
	name := p.Name()
	if !slices.ContainsFunc(m.pools, func(q *Pool) bool { return q.Name() == name }) {
		// The upstream is gone: so are its series.
		delete(m.retired, name)
		m.latency.DeleteLabelValues(name)
		m.responses.DeletePartialMatch(prometheus.Labels{"upstream": name})
		return
	}
	st := m.retired[name]
	st.add(p.Stats())
	m.retired[name] = st
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.latency.Collect(ch)
	m.responses.Collect(ch)
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	// One series per upstream, whose pools (two while a reload replaces
	// one) are added up: a registry refuses the same series twice.
	type group struct{ bind, state string }
	type upstream struct {
		sessions map[group]int
		inflight int
		st       Stats
	}
	m.mu.Lock()
	pools := slices.Clone(m.pools)
	ups := map[string]*upstream{}
	var names []string
	for _, p := range pools {
		if ups[p.Name()] == nil {
			u := &upstream{sessions: map[group]int{}}
			u.st.add(m.retired[p.Name()]) // a copy: Closed is a map
			ups[p.Name()] = u
			names = append(names, p.Name())
		}
	}
	m.mu.Unlock()
	for _, p := range pools {
		u := ups[p.Name()]
		for _, s := range p.Sessions() {
			if s.State == StateClosed {
				continue
			}
			u.sessions[group{s.Bind.Name(), s.State.String()}]++
			u.inflight += s.InFlight
		}
		u.st.add(p.Stats())
	}
	for _, name := range names {
		u := ups[name]
		for g, c := range u.sessions {
			ch <- prometheus.MustNewConstMetric(m.sessions, prometheus.GaugeValue, float64(c), name, g.bind, g.state)
		}
		ch <- prometheus.MustNewConstMetric(m.inFlight, prometheus.GaugeValue, float64(u.inflight), name)

		st := u.st
		counter(m.binds, st.Binds, name)
		counter(m.bindFailures, st.BindFailures, name)
		counter(m.written, st.Written, name)
		counter(m.failed, st.Timeouts, name, "timeout")
		counter(m.failed, st.SessionLost, name, "session_lost")
		counter(m.failed, st.NoSession, name, "no_session")
		counter(m.failed, st.Busy, name, "busy")
		counter(m.failed, st.NotSentOther, name, "not_sent_other")
		counter(m.failed, st.BadAnswers, name, "bad_answer")
		counter(m.late, st.LateResponses, name)
		for r := ReasonNone + 1; r < reasonCount; r++ {
			counter(m.closed, st.Closed[r], name, r.String())
		}
		counter(m.deliveries, st.Deliveries, name)
		counter(m.deliverRefused, st.DeliverRefused, name)
		counter(m.deliverPanics, st.DeliverPanics, name)
		counter(m.enquire, st.EnquireLinks, name)
	}
}
