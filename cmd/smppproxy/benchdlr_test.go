package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// With --dlr the bench reports the receipt latency of every receipt that
// names an answered submit's id: directly, one per submit; through the
// proxy, one per distinct key (a retry is a replay, not a new message).
// Each latency is at least the simulator's receipt delay.
func TestBenchDLRReportsReceiptLatency(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const delay = 20 * time.Millisecond
	s, err := sim.Start("127.0.0.1:0", sim.Config{SystemID: "b", Password: "p", DLRDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := runBench(ctx, benchOptions{Target: s.Addr(), SystemID: "b", Password: "p", Binds: 2, Window: 5, Count: 100,
		KeyTag: smpp.DefaultIdempotencyTag, Receipts: true, ReceiptQuiet: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.ReceiptLatencyMS == nil || r.ReceiptsMatched != 100 {
		t.Fatalf("receipt latency %+v over %d receipts; want 100 matched", r.ReceiptLatencyMS, r.ReceiptsMatched)
	}
	if l := r.ReceiptLatencyMS; l.P50 < float64(delay.Milliseconds()) || l.Max < l.P99 || l.P99 < l.P50 {
		t.Errorf("receipt latency %+v; want p50 >= %v and ordered percentiles", l, delay)
	}
	var out bytes.Buffer
	printBench(&out, r)
	if !strings.Contains(out.String(), "receipt latency (submit_sm_resp → deliver_sm, 100 matched)") {
		t.Errorf("output:\n%s", out.String())
	}

	runs, err := runEmbeddedBench(ctx, benchOptions{Binds: 2, Window: 10, Count: 200, Duplicates: 0.1, KeyTag: smpp.DefaultIdempotencyTag,
		Timeout: 10 * time.Second, Receipts: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if runs[0].ReceiptsMatched != 200 || runs[1].ReceiptsMatched != 180 {
		t.Errorf("receipts matched: direct %d, through the proxy %d; want 200, 180", runs[0].ReceiptsMatched, runs[1].ReceiptsMatched)
	}
	out.Reset()
	printBenchComparison(&out, runs[0], runs[1])
	if !strings.Contains(out.String(), "receipt latency p50 (ms)") {
		t.Errorf("comparison names no receipt latency:\n%s", out.String())
	}
}

// When the SMSC drops every bind the bench stops at once, saying no bind
// is left, instead of timing out each remaining submit; its errors are
// counted by kind.
func TestBenchStopsWhenNoBindIsLeft(t *testing.T) {
	s, err := sim.Start("127.0.0.1:0", sim.Config{SystemID: "b", Password: "p", Fault: func(c sim.Call) sim.Action {
		return sim.Action{Disconnect: c.N > 20}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	r, err := runBench(ctx, benchOptions{Target: s.Addr(), SystemID: "b", Password: "p", Binds: 2, Window: 5, Count: 100_000,
		KeyTag: smpp.DefaultIdempotencyTag, Timeout: 20 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "no bind left") {
		t.Fatalf("runBench = %v; want it stopped with no bind left", err)
	}
	if time.Since(start) > 10*time.Second || r.Count > 1000 {
		t.Errorf("the bench ran %v and sent %d submits after losing every bind", time.Since(start), r.Count)
	}
	if r.Errors == 0 || len(r.ErrorSamples) == 0 || len(r.ErrorCounts) > r.Errors {
		t.Fatalf("errors %d, kinds %v, lines %q", r.Errors, r.ErrorCounts, r.ErrorSamples)
	}
	sum := 0
	for _, n := range r.ErrorCounts {
		sum += n
	}
	if sum != r.Errors || !strings.Contains(r.ErrorSamples[0], "× ") {
		t.Errorf("error kinds %v sum to %d of %d errors; lines %q", r.ErrorCounts, sum, r.Errors, r.ErrorSamples)
	}
}

func TestErrorKindsGroupBySequence(t *testing.T) {
	counts := map[string]int{}
	for _, seq := range []string{"1", "22", "333"} {
		counts[errorKind(errors.New("esme: response timeout: sequence "+seq+" after 10s"))]++
	}
	counts[errorKind(errors.New("esme: connection closed"))]++
	lines := errorLines(counts, 1)
	want := []string{"3× esme: response timeout: sequence N after 10s", "… and 1 other kind(s) of error"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Errorf("errorLines = %q, want %q", lines, want)
	}
}
