package admin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metric names the stats summary reads. The summary is built from the
// registry, so it always agrees with /metrics; a family that is not
// registered (receipts before the receipt engine exists) is left out.
const (
	metricSubmits        = "smppproxy_dedup_submits_total"
	metricResolved       = "smppproxy_dedup_resolved_total"
	metricESMESessions   = "smppproxy_esme_sessions"
	metricESMEClosed     = "smppproxy_esme_sessions_closed_total"
	metricUpSessions     = "smppproxy_upstream_sessions"
	metricUpInFlight     = "smppproxy_upstream_in_flight"
	metricUpWritten      = "smppproxy_upstream_requests_written_total"
	metricUpFailed       = "smppproxy_upstream_requests_failed_total"
	metricUpResponses    = "smppproxy_upstream_responses_total"
	metricUpLatency      = "smppproxy_upstream_request_seconds"
	metricStoreOps       = "smppproxy_store_write_ops_total"
	metricStoreCommits   = "smppproxy_store_commits_total"
	metricStoreFailed    = "smppproxy_store_failed_writes_total"
	metricRecords        = "smppproxy_store_records"
	metricRecordsScanned = "smppproxy_store_records_scan_timestamp_seconds"
	metricRouteRetries   = "smppproxy_route_retries_total"
	// Receipts (SPEC §9): registered by the receipt engine.
	metricReceipts     = "smppproxy_receipts_total"            // {account, upstream, outcome}
	metricReceiptQueue = "smppproxy_receipts_queue_depth"      // {account}
	metricBuildInfo    = "smppproxy_build_info"                // {version, revision, goversion, instance_id}
	metricDeliveries   = "smppproxy_receipts_deliveries_total" // {account, outcome}
)

// Stats is the answer of GET /api/v1/stats: the counters that matter at a
// glance, summed from the metrics registry.
type Stats struct {
	// Submits by outcome (forwarded, replayed, joined, conflict, unknown,
	// rejected, throttled, untracked, retryable, invalid, store_error,
	// owner_dead).
	Submits map[string]float64 `json:"submits"`
	// SubmitsByAccount: account → outcome → count.
	SubmitsByAccount map[string]map[string]float64 `json:"submits_by_account"`
	// Resolved: unknown records resolved by an operator, by resulting state.
	Resolved map[string]float64 `json:"resolved,omitempty"`
	// ESMESessions: bound ESME sessions per account.
	ESMESessions map[string]float64 `json:"esme_sessions"`
	// ESMEClosed: ESME sessions closed, by reason (only reasons seen).
	ESMEClosed map[string]float64        `json:"esme_sessions_closed,omitempty"`
	Upstreams  map[string]*UpstreamStats `json:"upstreams"`
	Store      StoreStats                `json:"store"`
	// Records by state as of RecordsScannedAt (absent before the first scan).
	Records          map[string]float64 `json:"records,omitempty"`
	RecordsScannedAt *time.Time         `json:"records_scanned_at,omitempty"`
	RouteRetries     float64            `json:"route_retries"`
	// Receipts (and MO) from the upstreams by outcome (routed, queued,
	// duplicate, unmatched, matched_later, reconciled, mo, …), and the
	// receipt queue depth per account (receipts and MO waiting for an
	// ESME acknowledgement), once the receipt service exports them.
	Receipts     map[string]float64 `json:"receipts,omitempty"`
	ReceiptQueue map[string]float64 `json:"receipt_queue,omitempty"`
	// ReceiptDeliveries: deliver_sm sent to ESMEs by outcome (acked,
	// refused, timeout, session_lost, ack_store_error).
	ReceiptDeliveries map[string]float64 `json:"receipt_deliveries,omitempty"`
}

// UpstreamStats summarises one upstream.
type UpstreamStats struct {
	Bound      float64            `json:"bound"`
	Connecting float64            `json:"connecting"`
	InFlight   float64            `json:"in_flight"`
	Written    float64            `json:"requests_written"`
	Responses  map[string]float64 `json:"responses,omitempty"` // by status name
	Failed     map[string]float64 `json:"failed,omitempty"`    // by reason
	// MeanLatencySeconds over every answered request so far.
	MeanLatencySeconds float64 `json:"mean_latency_seconds,omitempty"`
}

// StoreStats summarises the store's group commit.
type StoreStats struct {
	WriteOps float64 `json:"write_ops"`
	Commits  float64 `json:"commits"`
	Failed   float64 `json:"failed"`
}

// BuildStats gathers g and summarises it.
func BuildStats(g prometheus.Gatherer) (*Stats, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	fams := make(families, len(mfs))
	for _, mf := range mfs {
		fams[mf.GetName()] = mf
	}
	s := &Stats{
		Submits: map[string]float64{}, SubmitsByAccount: map[string]map[string]float64{},
		ESMESessions: map[string]float64{}, Upstreams: map[string]*UpstreamStats{},
	}
	up := func(name string) *UpstreamStats {
		u := s.Upstreams[name]
		if u == nil {
			u = &UpstreamStats{}
			s.Upstreams[name] = u
		}
		return u
	}
	fams.each(metricSubmits, func(l labels, v float64) {
		s.Submits[l["outcome"]] += v
		a := s.SubmitsByAccount[l["account"]]
		if a == nil {
			a = map[string]float64{}
			s.SubmitsByAccount[l["account"]] = a
		}
		a[l["outcome"]] += v
	})
	fams.each(metricResolved, func(l labels, v float64) { add(&s.Resolved, l["state"], v) })
	fams.each(metricESMESessions, func(l labels, v float64) {
		if l["account"] != "" {
			s.ESMESessions[l["account"]] += v
		}
	})
	fams.each(metricESMEClosed, func(l labels, v float64) {
		if v > 0 {
			add(&s.ESMEClosed, l["reason"], v)
		}
	})
	fams.each(metricUpSessions, func(l labels, v float64) {
		switch l["state"] {
		case "bound":
			up(l["upstream"]).Bound += v
		case "connecting":
			up(l["upstream"]).Connecting += v
		}
	})
	fams.each(metricUpInFlight, func(l labels, v float64) { up(l["upstream"]).InFlight += v })
	fams.each(metricUpWritten, func(l labels, v float64) { up(l["upstream"]).Written += v })
	fams.each(metricUpFailed, func(l labels, v float64) {
		if v > 0 {
			add(&up(l["upstream"]).Failed, l["reason"], v)
		}
	})
	fams.each(metricUpResponses, func(l labels, v float64) { add(&up(l["upstream"]).Responses, l["status"], v) })
	if mf := fams[metricUpLatency]; mf != nil {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil && h.GetSampleCount() > 0 {
				up(labelsOf(m)["upstream"]).MeanLatencySeconds = h.GetSampleSum() / float64(h.GetSampleCount())
			}
		}
	}
	fams.each(metricStoreOps, func(_ labels, v float64) { s.Store.WriteOps += v })
	fams.each(metricStoreCommits, func(_ labels, v float64) { s.Store.Commits += v })
	fams.each(metricStoreFailed, func(_ labels, v float64) { s.Store.Failed += v })
	fams.each(metricRecords, func(l labels, v float64) { add(&s.Records, l["state"], v) })
	fams.each(metricRecordsScanned, func(_ labels, v float64) {
		t := time.Unix(0, int64(v*1e9)).UTC()
		s.RecordsScannedAt = &t
	})
	fams.each(metricRouteRetries, func(_ labels, v float64) { s.RouteRetries += v })
	fams.each(metricReceipts, func(l labels, v float64) { add(&s.Receipts, l["outcome"], v) })
	fams.each(metricReceiptQueue, func(l labels, v float64) { add(&s.ReceiptQueue, l["account"], v) })
	fams.each(metricDeliveries, func(l labels, v float64) { add(&s.ReceiptDeliveries, l["outcome"], v) })
	return s, nil
}

// sessionGauges gathers g and returns the receipt queue depth per
// account and this instance's id (smppproxy_build_info's instance_id).
func sessionGauges(g prometheus.Gatherer) (depths map[string]float64, instance string, err error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, "", err
	}
	fams := families{}
	for _, mf := range mfs {
		if name := mf.GetName(); name == metricReceiptQueue || name == metricBuildInfo {
			fams[name] = mf
		}
	}
	fams.each(metricReceiptQueue, func(l labels, v float64) { add(&depths, l["account"], v) })
	fams.each(metricBuildInfo, func(l labels, _ float64) { instance = l["instance_id"] })
	return depths, instance, nil
}

type labels map[string]string

type families map[string]*dto.MetricFamily

// each calls fn for every counter, gauge or untyped sample of the family.
func (f families) each(name string, fn func(labels, float64)) {
	mf := f[name]
	if mf == nil {
		return
	}
	for _, m := range mf.GetMetric() {
		var v float64
		switch {
		case m.Counter != nil:
			v = m.GetCounter().GetValue()
		case m.Gauge != nil:
			v = m.GetGauge().GetValue()
		case m.Untyped != nil:
			v = m.GetUntyped().GetValue()
		default:
			continue
		}
		fn(labelsOf(m), v)
	}
}

func labelsOf(m *dto.Metric) labels {
	l := make(labels, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

func add(m *map[string]float64, k string, v float64) {
	if *m == nil {
		*m = map[string]float64{}
	}
	(*m)[k] += v
}
