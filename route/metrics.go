package route

import "github.com/prometheus/client_golang/prometheus"

// Metrics exports a Router to Prometheus (subsystem "route"); a
// prometheus.Collector that reads the Router's counters at scrape time.
type Metrics struct {
	r       *Router
	retries *prometheus.Desc
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics returns the collector for r.
func NewMetrics(r *Router) *Metrics {
	return &Metrics{r: r, retries: prometheus.NewDesc("smppproxy_route_retries_total",
		"Internal retries of submits that met a temporary upstream error (0x08, 0x14, 0x58, 0x64).", nil, nil)}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.retries }

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(m.retries, prometheus.CounterValue, float64(m.r.Retries()))
}
