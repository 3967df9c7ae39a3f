package smppclient

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smppproxy/smppproxy/smpp"
)

// An instrumented pool observes each answered request once, by status, and
// still runs the caller's beforeWrite; the pool's counters are pulled at
// scrape time.
func TestMetricsInstrumentAndCollect(t *testing.T) {
	f := startFake(t)
	f.onSubmit = func(c *fakeConn, h smpp.Header, _ []byte) {
		st := smpp.StatusOK
		if h.Sequence == 2 {
			st = smpp.StatusThrottled
		}
		time.Sleep(2 * time.Millisecond) // deliberately slow: the latency histogram must see ≥2ms
		c.answer(h, st)
	}
	p := newPool(t, f.addr, nil)
	waitUp(t, p, 1)
	m := NewMetrics(p)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	ip := m.Instrument(p)

	journaled := 0
	for range 3 {
		if _, err := ip.Submit(context.Background(), "", submitFrame, func(string, uint32) error { journaled++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	refused := errors.New("journal refused")
	if _, err := ip.Submit(context.Background(), "", submitFrame, func(string, uint32) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("Submit with a failing beforeWrite = %v", err)
	}
	if journaled != 3 {
		t.Fatalf("beforeWrite called %d times, want 3", journaled)
	}
	want := `
# HELP smppproxy_upstream_responses_total Responses to forwarded requests by upstream and SMPP status name ("other" for a status outside the SMPP status table).
# TYPE smppproxy_upstream_responses_total counter
smppproxy_upstream_responses_total{status="ESME_ROK",upstream="up"} 2
smppproxy_upstream_responses_total{status="ESME_RTHROTTLED",upstream="up"} 1
# HELP smppproxy_upstream_requests_written_total Requests written to the upstream.
# TYPE smppproxy_upstream_requests_written_total counter
smppproxy_upstream_requests_written_total{upstream="up"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "smppproxy_upstream_responses_total", "smppproxy_upstream_requests_written_total"); err != nil {
		t.Fatal(err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "smppproxy_upstream_request_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 3 || h.GetSampleSum() < 0.006 {
				t.Fatalf("latency histogram: %d samples, sum %v; want 3 samples of ≥2ms", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
	sessions := `
# HELP smppproxy_upstream_sessions Upstream binds by upstream, bind type and state (connecting, bound).
# TYPE smppproxy_upstream_sessions gauge
smppproxy_upstream_sessions{bind="transceiver",state="bound",upstream="up"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(sessions), "smppproxy_upstream_sessions"); err != nil {
		t.Fatalf("sessions series, want one (transceiver, bound): %v", err)
	}
}
