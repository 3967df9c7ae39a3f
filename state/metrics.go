package state

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultScanCap is how many records one RefreshRecords visits at most
// when Metrics.ScanCap is zero.
const DefaultScanCap = 1_000_000

// Metrics exports a Store to Prometheus (subsystem "store"). It is a
// prometheus.Collector:
//
//   - a BadgerStore's group-commit counters are read from Stats at scrape
//     time (write ops, commits, failed writes; ops/commits is the batch
//     size), and so are the commits found lost at open;
//   - the latency of Create and Update as their callers see it (queueing,
//     group commit and fsync) is observed by the Store that Instrument
//     returns;
//   - records by state come from the last RefreshRecords, a capped Scan
//     that Run repeats on a period: a scrape never scans the store;
//   - commit duration and batch size histograms are filled by ObserveCommit
//     (for a per-commit hook in the committer) and appear once it is called.
//
// Register it on an injected Registerer.
type Metrics struct {
	// ScanCap bounds the records one RefreshRecords visits (0 =
	// DefaultScanCap). When the store holds more, the counts cover the
	// first ScanCap records and smppproxy_store_records_scan_complete is 0.
	ScanCap int

	store  Store
	badger interface{ Stats() BadgerStats }

	writes        *prometheus.HistogramVec
	commitSeconds prometheus.Histogram
	commitBatch   prometheus.Histogram

	ops, commits, failed, lost      *prometheus.Desc
	records, scanTime, scanComplete *prometheus.Desc

	mu        sync.Mutex
	counts    map[SubmitState]int
	scannedAt time.Time
	complete  bool
	observed  bool // ObserveCommit was called
}

var _ prometheus.Collector = (*Metrics)(nil)

// allStates lists every SubmitState, in the order of the state machine.
var allStates = []SubmitState{Sent, Accepted, Rejected, Unknown, Retryable}

// NewMetrics returns the collector for s.
func NewMetrics(s Store) *Metrics {
	m := &Metrics{
		store: s,
		writes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "smppproxy", Subsystem: "store", Name: "write_seconds",
			Help:    "Durable write latency (Create, Update, Replace) as callers see it: queueing, group commit and fsync.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5ms … 4s
		}, []string{"op"}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "smppproxy", Subsystem: "store", Name: "commit_seconds",
			Help:    "Duration of one group commit (one transaction, one fsync).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		commitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "smppproxy", Subsystem: "store", Name: "commit_batch_size",
			Help:    "Write requests committed together in one group commit (successful commits only, as smppproxy_store_commits_total counts them).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14), // 1 … 8192 (the committer's cap)
		}),
		ops: prometheus.NewDesc("smppproxy_store_write_ops_total",
			"Write requests (Create, Update, Replace, queue operations) handled by the committer.", nil, nil),
		commits: prometheus.NewDesc("smppproxy_store_commits_total",
			"Transactions committed, one fsync each; write_ops_total / commits_total is the mean batch size.", nil, nil),
		failed: prometheus.NewDesc("smppproxy_store_failed_writes_total",
			"Write requests refused because their transaction could not be committed (disk full, I/O error).", nil, nil),
		lost: prometheus.NewDesc("smppproxy_store_lost_commits",
			"Commits found missing when the store was opened (a write-ahead log cut short) and started anyway with --force-empty-store; 0 on a normal start.", nil, nil),
		records: prometheus.NewDesc("smppproxy_store_records",
			"Live records by submit state, as of the last periodic count (of at most the scan cap).", []string{"state"}, nil),
		scanTime: prometheus.NewDesc("smppproxy_store_records_scan_timestamp_seconds",
			"When the last count of records by state finished (Unix time).", nil, nil),
		scanComplete: prometheus.NewDesc("smppproxy_store_records_scan_complete",
			"1 if the last count covered every record, 0 if it stopped at the scan cap.", nil, nil),
	}
	if b, ok := s.(interface{ Stats() BadgerStats }); ok {
		m.badger = b
	}
	return m
}

// Instrument returns s with the latency of Create, Update and Replace
// observed by m. Every other method is s's (GetHot too, when s has it).
func (m *Metrics) Instrument(s Store) Store {
	return &instrumented{Store: s, m: m, create: m.writes.WithLabelValues("create"),
		update: m.writes.WithLabelValues("update"), replace: m.writes.WithLabelValues("replace")}
}

type instrumented struct {
	Store
	m *Metrics
	// the write latency histograms, looked up once
	create, update, replace prometheus.Observer
}

func (i *instrumented) Create(ctx context.Context, rec *Record) (*Record, bool, error) {
	start := time.Now()
	existing, created, err := i.Store.Create(ctx, rec)
	i.create.Observe(time.Since(start).Seconds())
	return existing, created, err
}

func (i *instrumented) Update(ctx context.Context, k Key, fn func(*Record) error) (*Record, error) {
	start := time.Now()
	r, err := i.Store.Update(ctx, k, fn)
	i.update.Observe(time.Since(start).Seconds())
	return r, err
}

func (i *instrumented) Replace(ctx context.Context, old, rec *Record) error {
	start := time.Now()
	err := i.Store.Replace(ctx, old, rec)
	i.replace.Observe(time.Since(start).Seconds())
	return err
}

// GetHot implements HotReader: s's GetHot when it has one, else its Get.
func (i *instrumented) GetHot(ctx context.Context, k Key) (*Record, error) {
	if h, ok := i.Store.(HotReader); ok {
		return h.GetHot(ctx, k)
	}
	return i.Store.Get(ctx, k)
}

// ObserveCommit records one group commit of ops write requests that took
// took. It is meant for a committer hook; the commit histograms are
// exported from the first call on.
func (m *Metrics) ObserveCommit(ops int, took time.Duration) {
	m.commitSeconds.Observe(took.Seconds())
	m.commitBatch.Observe(float64(ops))
	m.mu.Lock()
	m.observed = true
	m.mu.Unlock()
}

// StateCounter is a Store that counts its live records by state itself,
// over at most limit of them (complete: none was left out). RefreshRecords
// asks it instead of scanning: a Scan decodes every record, and on a
// shared store carries each of them over the network.
type StateCounter interface {
	CountStates(ctx context.Context, limit int) (counts map[SubmitState]int, complete bool, err error)
}

// RefreshRecords counts the live records by state, over at most ScanCap
// records: by the store when it is a StateCounter, else with one Scan.
func (m *Metrics) RefreshRecords(ctx context.Context) error {
	limit := m.ScanCap
	if limit <= 0 {
		limit = DefaultScanCap
	}
	counts, complete, err := m.count(ctx, limit)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.counts, m.scannedAt, m.complete = counts, time.Now(), complete
	m.mu.Unlock()
	return nil
}

// count counts the live records by state over at most limit of them.
func (m *Metrics) count(ctx context.Context, limit int) (map[SubmitState]int, bool, error) {
	if sc, ok := m.store.(StateCounter); ok {
		return sc.CountStates(ctx, limit)
	}
	counts := make(map[SubmitState]int, len(allStates))
	n := 0
	complete := true
	err := m.store.Scan(ctx, func(r *Record) bool {
		if n >= limit {
			complete = false
			return false
		}
		n++
		counts[r.State]++
		return true
	})
	return counts, complete, err
}

// scanShare bounds the time Run spends scanning: after a scan that took d,
// the next starts no sooner than d/scanShare later.
const scanShare = 0.05

// nextScan is how long Run waits after a scan that took took: every, or
// longer when the scans are long, so that they take at most scanShare of
// the time (a store of millions of records is not scanned back to back).
func nextScan(every, took time.Duration) time.Duration {
	return max(every, time.Duration(float64(took)/scanShare))
}

// Run calls RefreshRecords at once and then every period (or less often,
// see nextScan) until ctx ends or the store is closed. Other scan errors
// are passed to onErr (may be nil) and the next period tries again.
func (m *Metrics) Run(ctx context.Context, every time.Duration, onErr func(error)) {
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		start := time.Now()
		err := m.RefreshRecords(ctx)
		switch {
		case errors.Is(err, ErrClosed), ctx.Err() != nil:
			return
		case err != nil && onErr != nil:
			onErr(err)
		}
		t.Reset(nextScan(every, time.Since(start)))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.writes.Describe(ch)
	m.commitSeconds.Describe(ch)
	m.commitBatch.Describe(ch)
	for _, d := range []*prometheus.Desc{m.ops, m.commits, m.failed, m.lost, m.records, m.scanTime, m.scanComplete} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.writes.Collect(ch)
	if b := m.badger; b != nil {
		st := b.Stats()
		ch <- prometheus.MustNewConstMetric(m.ops, prometheus.CounterValue, float64(st.Ops))
		ch <- prometheus.MustNewConstMetric(m.commits, prometheus.CounterValue, float64(st.Commits))
		ch <- prometheus.MustNewConstMetric(m.failed, prometheus.CounterValue, float64(st.Failed))
		ch <- prometheus.MustNewConstMetric(m.lost, prometheus.GaugeValue, float64(st.LostCommits))
	}
	m.mu.Lock()
	counts, at, complete, observed := m.counts, m.scannedAt, m.complete, m.observed
	m.mu.Unlock()
	if observed {
		m.commitSeconds.Collect(ch)
		m.commitBatch.Collect(ch)
	}
	if counts == nil {
		return // no scan yet
	}
	for _, s := range allStates {
		ch <- prometheus.MustNewConstMetric(m.records, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(m.scanTime, prometheus.GaugeValue, float64(at.UnixNano())/1e9)
	c := 0.0
	if complete {
		c = 1
	}
	ch <- prometheus.MustNewConstMetric(m.scanComplete, prometheus.GaugeValue, c)
}
