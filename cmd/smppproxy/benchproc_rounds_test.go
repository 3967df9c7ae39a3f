package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// The proxy's CPU per receipt is what the receipts run cost beyond its
// submits (each costing what one of the saturation run did), per receipt;
// nothing is reported when the CPU time was not read.
func TestReceiptCPUIsTheReceiptsRunLessItsSubmits(t *testing.T) {
	n := 10000
	r := procRound{
		ProxiedSat:       benchResult{Count: 20000},
		DirectReceipts:   &benchResult{},
		ProxiedReceipts:  &benchResult{Count: 10000, Receipts: &n},
		SatProxyCPU:      2.0, // 100 µs per submit
		ReceiptsProxyCPU: 2.5,
	}
	if got := r.ReceiptCPU(); math.Abs(got-150) > 1e-9 {
		t.Errorf("ReceiptCPU() = %v µs; want 150", got)
	}
	rep := procReport{DLRDelay: "200ms", Runs: []procRound{r}}
	rep.summarize()
	var out bytes.Buffer
	printProcReport(&out, rep)
	if !strings.Contains(out.String(), "proxy CPU per receipt (µs)") || !strings.Contains(out.String(), "150.00") {
		t.Errorf("table has no proxy CPU per receipt of 150.00 µs:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "proxy CPU per fresh submit (µs)") || !strings.Contains(out.String(), "100.00") {
		t.Errorf("table has no proxy CPU per fresh submit of 100.00 µs:\n%s", out.String())
	}

	r.SatProxyCPU = 0 // /proc not readable
	rep = procReport{DLRDelay: "200ms", Runs: []procRound{r}}
	rep.summarize()
	out.Reset()
	printProcReport(&out, rep)
	if r.ReceiptCPU() != 0 || strings.Contains(out.String(), "proxy CPU per receipt") {
		t.Errorf("without the CPU time read: ReceiptCPU() = %v, table:\n%s", r.ReceiptCPU(), out.String())
	}
}

// The proxy's CPU per retry is the retries run's CPU time per retry; it
// is left out of the table when the CPU time was not read.
func TestRetryCPUIsTheRetriesRunPerRetry(t *testing.T) {
	r := procRound{Retry: benchResult{Count: 40000}, RetryProxyCPU: 0.8}
	if got := r.RetryCPU(); math.Abs(got-20) > 1e-9 {
		t.Errorf("RetryCPU() = %v µs; want 20", got)
	}
	rep := procReport{Runs: []procRound{r}}
	rep.summarize()
	var out bytes.Buffer
	printProcReport(&out, rep)
	if !strings.Contains(out.String(), "proxy CPU per retry (µs)") || !strings.Contains(out.String(), "20.00") {
		t.Errorf("table has no proxy CPU per retry of 20.00 µs:\n%s", out.String())
	}
	r.RetryProxyCPU = 0
	rep = procReport{Runs: []procRound{r}}
	rep.summarize()
	out.Reset()
	printProcReport(&out, rep)
	if strings.Contains(out.String(), "proxy CPU per retry") || strings.Contains(out.String(), "per fresh submit") {
		t.Errorf("rows of CPU time not read are in the table:\n%s", out.String())
	}
}
