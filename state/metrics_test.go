package state_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
)

func fill(t *testing.T, s state.Store, n map[state.SubmitState]int) {
	t.Helper()
	now := time.Now()
	i := 0
	for st, count := range n {
		for range count {
			i++
			rec := &state.Record{Key: state.Key{Account: "a", Key: fmt.Sprintf("k:%d", i)}, State: st, Created: now, Updated: now, Expires: now.Add(time.Hour)}
			if _, created, err := s.Create(context.Background(), rec); err != nil || !created {
				t.Fatalf("Create: %v %v", created, err)
			}
		}
	}
}

func TestMetricsCountRecordsByStateOnRefreshOnly(t *testing.T) {
	s, err := state.OpenBadger(state.BadgerOptions{Path: t.TempDir(), MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := state.NewMetrics(s)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	fill(t, m.Instrument(s), map[state.SubmitState]int{state.Accepted: 3, state.Unknown: 2})

	// Before the first scan there is no records gauge: a scrape never scans.
	if n, _ := testutil.GatherAndCount(reg, "smppproxy_store_records"); n != 0 {
		t.Fatalf("records gauge before any scan: %d series, want 0", n)
	}
	if err := m.RefreshRecords(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP smppproxy_store_records Live records by submit state, as of the last periodic count (of at most the scan cap).
# TYPE smppproxy_store_records gauge
smppproxy_store_records{state="accepted"} 3
smppproxy_store_records{state="rejected"} 0
smppproxy_store_records{state="retryable"} 0
smppproxy_store_records{state="sent"} 0
smppproxy_store_records{state="unknown"} 2
# HELP smppproxy_store_records_scan_complete 1 if the last count covered every record, 0 if it stopped at the scan cap.
# TYPE smppproxy_store_records_scan_complete gauge
smppproxy_store_records_scan_complete 1
# HELP smppproxy_store_write_ops_total Write requests (Create, Update, Replace, queue operations) handled by the committer.
# TYPE smppproxy_store_write_ops_total counter
smppproxy_store_write_ops_total 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "smppproxy_store_records", "smppproxy_store_records_scan_complete", "smppproxy_store_write_ops_total"); err != nil {
		t.Fatal(err)
	}
	// The write latency series exist from the start, one per operation;
	// only create was used.
	if n, _ := testutil.GatherAndCount(reg, "smppproxy_store_write_seconds"); n != 3 {
		t.Fatalf("write latency series = %d, want 3 (create, update, replace)", n)
	}
	if got := writeCounts(t, reg); got["create"] != 5 || got["update"] != 0 || got["replace"] != 0 {
		t.Fatalf("write latency counts = %v, want 5 creates and nothing else", got)
	}
	// More records than the cap: counts cover the cap, and say so.
	m.ScanCap = 4
	if err := m.RefreshRecords(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := value(t, reg, "smppproxy_store_records_scan_complete"); v != 0 {
		t.Fatalf("scan_complete with a cap of 4 over 5 records = %v, want 0", v)
	}
	// The commit histograms appear once a commit hook reports.
	if n, _ := testutil.GatherAndCount(reg, "smppproxy_store_commit_batch_size"); n != 0 {
		t.Fatalf("batch size histogram before any ObserveCommit: %d series", n)
	}
	m.ObserveCommit(7, time.Millisecond)
	if n, _ := testutil.GatherAndCount(reg, "smppproxy_store_commit_batch_size", "smppproxy_store_commit_seconds"); n != 2 {
		t.Fatalf("commit histograms after ObserveCommit: %d series, want 2", n)
	}
}

// value returns the one sample of the unlabelled gauge name in reg.
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single sample %s", name)
	return 0
}

func TestMetricsRunStopsWhenTheStoreCloses(t *testing.T) {
	s := state.NewMem(nil)
	m := state.NewMetrics(s)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(context.Background(), time.Millisecond, func(err error) { t.Errorf("scan error: %v", err) })
	}()
	// Close while Run is looping: after it has refreshed at least once.
	// (A scrape shows the records gauge only after a scan.)
	testkit.Eventually(t, 5*time.Second, func() bool {
		n, _ := testutil.GatherAndCount(reg, "smppproxy_store_records")
		return n > 0
	}, "Run never refreshed the record counts")
	_ = s.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run still running after Close")
	}
}

// writeCounts returns the sample count of each op's write latency.
func writeCounts(t *testing.T, reg *prometheus.Registry) map[string]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "smppproxy_store_write_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" {
					out[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}

// counting is a store that counts its records by state itself; a Scan of
// it fails the test.
type counting struct {
	state.Store
	t      *testing.T
	limits []int
}

func (c *counting) CountStates(_ context.Context, limit int) (map[state.SubmitState]int, bool, error) {
	c.limits = append(c.limits, limit)
	return map[state.SubmitState]int{state.Accepted: 7, state.Sent: 1}, false, nil
}

func (c *counting) Scan(context.Context, func(*state.Record) bool) error {
	c.t.Error("RefreshRecords scanned a store that counts by state itself")
	return nil
}

// A store that counts its records by state itself (a database) is asked
// for the counts, with the scan cap, instead of sending every record.
func TestMetricsAskAStoreThatCountsByStateInsteadOfScanning(t *testing.T) {
	s := &counting{Store: state.NewMem(time.Now), t: t}
	m := state.NewMetrics(s)
	m.ScanCap = 1000
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	if err := m.RefreshRecords(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP smppproxy_store_records Live records by submit state, as of the last periodic count (of at most the scan cap).
# TYPE smppproxy_store_records gauge
smppproxy_store_records{state="accepted"} 7
smppproxy_store_records{state="rejected"} 0
smppproxy_store_records{state="retryable"} 0
smppproxy_store_records{state="sent"} 1
smppproxy_store_records{state="unknown"} 0
# HELP smppproxy_store_records_scan_complete 1 if the last count covered every record, 0 if it stopped at the scan cap.
# TYPE smppproxy_store_records_scan_complete gauge
smppproxy_store_records_scan_complete 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "smppproxy_store_records", "smppproxy_store_records_scan_complete"); err != nil {
		t.Fatal(err)
	}
	if len(s.limits) != 1 || s.limits[0] != 1000 {
		t.Errorf("CountStates asked with limits %v; want once with the scan cap 1000", s.limits)
	}
}
