package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

func TestBenchPlan(t *testing.T) {
	for _, tt := range []struct {
		count    int
		d        float64
		wantDups int
	}{{100, 0, 0}, {100, 0.1, 10}, {1000, 0.25, 250}, {1, 0.5, 0}} {
		plan, dups := benchPlan(tt.count, tt.d)
		if len(plan) != tt.count || dups != tt.wantDups {
			t.Errorf("benchPlan(%d, %v) = %d submits, %d duplicates; want %d, %d", tt.count, tt.d, len(plan), dups, tt.count, tt.wantDups)
		}
		fresh := 0
		for i, k := range plan {
			switch {
			case k == fresh:
				fresh++
			case k > fresh:
				t.Fatalf("benchPlan(%d, %v)[%d] = key %d, before key %d was sent", tt.count, tt.d, i, k, fresh)
			}
		}
		if fresh+dups != tt.count {
			t.Errorf("benchPlan(%d, %v): %d new keys + %d duplicates != %d", tt.count, tt.d, fresh, dups, tt.count)
		}
	}
}

func TestRunBench(t *testing.T) {
	s, err := sim.Start("127.0.0.1:0", sim.Config{SystemID: "b", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r, err := runBench(ctx, benchOptions{Target: s.Addr(), SystemID: "b", Password: "p", Binds: 2, Window: 5, Count: 300, Duplicates: 0.1, KeyTag: smpp.DefaultIdempotencyTag, KeyPrefix: "t-"})
	if err != nil {
		t.Fatalf("runBench: %v", err)
	}
	if r.Answered != 300 || r.Errors != 0 || r.Statuses["ESME_ROK"] != 300 {
		t.Errorf("runBench = %d answered, %d errors, statuses %v; want 300 ESME_ROK", r.Answered, r.Errors, r.Statuses)
	}
	if r.DuplicateSubmits != 30 {
		t.Errorf("DuplicateSubmits = %d, want 30", r.DuplicateSubmits)
	}
	if got := s.Total(); got != 300 {
		t.Errorf("sim.Total() = %d, want 300", got)
	}
	if got := len(s.Counts()); got != 270 {
		t.Errorf("distinct keys at the simulator = %d, want 270", got)
	}
	if r.Throughput <= 0 || r.LatencyMS.P50 <= 0 || r.LatencyMS.Max < r.LatencyMS.P99 || r.LatencyMS.P99 < r.LatencyMS.P50 {
		t.Errorf("throughput %v, latency %+v", r.Throughput, r.LatencyMS)
	}
	var out bytes.Buffer
	if err := printBenchJSON(&out, []benchResult{r}); err != nil {
		t.Fatal(err)
	}
	var back benchResult
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Answered != 300 {
		t.Errorf("JSON round trip: %v, %+v", err, back)
	}

	if _, err := runBench(ctx, benchOptions{Target: s.Addr(), SystemID: "b", Password: "wrong", Binds: 1, Window: 1, Count: 1}); err == nil {
		t.Error("runBench with a wrong password: no error")
	}
}

func TestEmbeddedBench(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	runs, err := runEmbeddedBench(ctx, benchOptions{Binds: 2, Window: 10, Count: 400, Duplicates: 0.1, KeyTag: smpp.DefaultIdempotencyTag, Timeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatalf("runEmbeddedBench: %v", err)
	}
	direct, via := runs[0], runs[1]
	for _, r := range runs {
		if r.Answered != 400 || r.Errors != 0 || r.Statuses["ESME_ROK"] != 400 {
			t.Errorf("%s: %d answered, %d errors, statuses %v; want 400 ESME_ROK", r.Label, r.Answered, r.Errors, r.Statuses)
		}
	}
	if *direct.ReachedSMSC != 400 || *via.ReachedSMSC != 360 {
		t.Errorf("reached the SMSC: direct %d, through the proxy %d; want 400, 360", *direct.ReachedSMSC, *via.ReachedSMSC)
	}
	if *via.DuplicatesAtSMSC != 0 || *direct.DuplicatesAtSMSC == 0 {
		t.Errorf("keys at the SMSC twice: direct %d, through the proxy %d; want some, 0", *direct.DuplicatesAtSMSC, *via.DuplicatesAtSMSC)
	}
	var out bytes.Buffer
	printBenchComparison(&out, direct, via)
	if !strings.Contains(out.String(), "through smppproxy") {
		t.Errorf("comparison output:\n%s", out.String())
	}
}

// With --receipts every submit asks for a receipt and the bench counts the
// receipts it receives and their rate: directly every accepted submit gets
// one; through the proxy a retried key is a replay, not a new message, so
// only the distinct keys do.
func TestBenchCountsReceipts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runs, err := runEmbeddedBench(ctx, benchOptions{Binds: 2, Window: 10, Count: 200, Duplicates: 0.1, KeyTag: smpp.DefaultIdempotencyTag,
		Timeout: 10 * time.Second, Receipts: true}, nil)
	if err != nil {
		t.Fatalf("runEmbeddedBench: %v", err)
	}
	direct, via := runs[0], runs[1]
	if direct.Receipts == nil || via.Receipts == nil {
		t.Fatalf("receipts not counted: direct %v, via %v", direct.Receipts, via.Receipts)
	}
	if *direct.Receipts != 200 || *via.Receipts != 180 {
		t.Errorf("receipts received: direct %d, through the proxy %d; want 200, 180", *direct.Receipts, *via.Receipts)
	}
	if direct.ReceiptsPerSecond <= 0 || via.ReceiptsPerSecond <= 0 {
		t.Errorf("receipts/s: direct %v, through the proxy %v; want > 0", direct.ReceiptsPerSecond, via.ReceiptsPerSecond)
	}
	var out bytes.Buffer
	printBenchComparison(&out, direct, via)
	printBench(&out, via)
	if !strings.Contains(out.String(), "receipts/s") {
		t.Errorf("output names no receipts/s:\n%s", out.String())
	}
}

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
