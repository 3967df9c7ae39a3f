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

// PostgreSQL's CPU per fresh submit is its processes' CPU time over the
// saturation run per submit, shown when it was measured (a database on
// this machine) and left out otherwise.
func TestDatabaseCPUIsShownPerFreshSubmitWhenMeasured(t *testing.T) {
	r := procRound{ProxiedSat: benchResult{Count: 20000}, SatProxyCPU: 2.0, SatDBCPU: 1.5}
	if got := r.DBSubmitCPU(); math.Abs(got-75) > 1e-9 {
		t.Errorf("DBSubmitCPU() = %v µs; want 75", got)
	}
	rep := procReport{Runs: []procRound{r}}
	rep.summarize()
	var out bytes.Buffer
	printProcReport(&out, rep)
	if !strings.Contains(out.String(), "PostgreSQL CPU per fresh submit (µs)") || !strings.Contains(out.String(), "75.00") {
		t.Errorf("table has no PostgreSQL CPU per fresh submit of 75.00 µs:\n%s", out.String())
	}
	r.SatDBCPU = 0 // a database elsewhere, or Badger
	rep = procReport{Runs: []procRound{r}}
	rep.summarize()
	out.Reset()
	printProcReport(&out, rep)
	if strings.Contains(out.String(), "PostgreSQL CPU") {
		t.Errorf("PostgreSQL CPU shown without being measured:\n%s", out.String())
	}
}

// A /proc/PID/stat line gives its command (which may hold spaces and
// parentheses) and its CPU time; only a database on this machine is
// measured.
func TestProcessCPUIsReadFromProcStat(t *testing.T) {
	line := []byte("4242 (postgres: root test 127.0.0.1(5) idle) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 130 0 0 20 0 1 0 100 0 0")
	comm, cpu, ok := statCPU(line)
	if !ok || comm != "postgres: root test 127.0.0.1(5) idle" || math.Abs(cpu-3.8) > 1e-9 {
		t.Errorf("statCPU = %q, %v, %v; want the command, 3.8 s, true", comm, cpu, ok)
	}
	if _, _, ok := statCPU([]byte("4242 (cut")); ok {
		t.Error("statCPU read a truncated line")
	}
	for dsn, want := range map[string]bool{
		"postgres://u@127.0.0.1:5432/db": true, "postgres://u@localhost/db": true, "host=/var/run/postgresql dbname=db": true,
		"postgres://u@[::1]:5432/db": true, "postgres://u@db.example.net/db": false, "postgres://u@10.0.0.5/db": false, "": false,
	} {
		if got := localDSN(dsn); got != want {
			t.Errorf("localDSN(%q) = %v, want %v", dsn, got, want)
		}
	}
}
