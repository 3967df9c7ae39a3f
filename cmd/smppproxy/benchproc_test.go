package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/smpp"
)

// testProcOptions runs the out-of-process bench's children from this test
// binary (TestMain runs main() for them), with a short load, in a
// directory removed after the test (a failed bench keeps its own).
func testProcOptions(t *testing.T, count, preload int) procBenchOptions {
	return procBenchOptions{TempDir: t.TempDir(),
		Load:   benchOptions{Binds: 2, Window: 20, Count: count, KeyTag: smpp.DefaultIdempotencyTag, Timeout: 10 * time.Second},
		Rounds: 1, Rate: 2000, Preload: preload, DLRDelay: 50 * time.Millisecond,
		Exe: os.Args[0], ExeArgs: []string{"-test.run=^$", "--"}, Env: []string{"SMPPPROXY_TEST_MAIN=1"},
	}
}

// assertChildrenGone fails unless every pid is gone (stopped and reaped).
func assertChildrenGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("child process %d still exists after the bench returned (kill -0: %v)", pid, err)
		}
	}
}

// Three real processes: every proxied submit is answered, no key reaches
// the SMSC twice, a retry of an acknowledged key keeps its message id,
// the proxy's memory and start-up with the preloaded keys are measured,
// and the children (the restarted proxy too) are gone once it returns.
func TestProcessBenchHoldsItsInvariantsAndStopsItsChildren(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	const count, preload = 1000, 500
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := runProcessBench(ctx, testProcOptions(t, count, preload))
	if err != nil {
		t.Fatalf("runProcessBench: %v", err)
	}
	assertChildrenGone(t, rep.Invariants.ChildPIDs)
	if n := len(rep.Invariants.ChildPIDs); n != 3 {
		t.Errorf("%d child processes started, want 3 (sim, serve, serve again after the preload)", n)
	}
	inv := rep.Invariants
	// Per round: saturation, retry, fixed rate, receipts.
	if want := preload + 4*count; inv.ProxiedSubmits != want || inv.ProxiedAnswered != want {
		t.Errorf("proxied submits %d, answered %d; want %d and %d", inv.ProxiedSubmits, inv.ProxiedAnswered, want, want)
	}
	if inv.DuplicatesAtSMSC != 0 || inv.ChangedIDs != 0 || !inv.Hold() {
		t.Errorf("keys at the SMSC twice %d, changed ids %d, Hold() %v; want 0, 0, true", inv.DuplicatesAtSMSC, inv.ChangedIDs, inv.Hold())
	}
	if inv.ServePeakRSSKB <= 0 || inv.ReachedSMSC <= 0 {
		t.Errorf("proxy peak RSS %d kB, submits at the SMSC %d; want both > 0", inv.ServePeakRSSKB, inv.ReachedSMSC)
	}
	if inv.ServePeakAnonKB <= 0 || inv.ServePeakFileKB <= 0 || inv.ServePeakAnonKB+inv.ServePeakFileKB < inv.ServePeakRSSKB/2 {
		t.Errorf("proxy's RSS parts over the rounds: anonymous %d, file-backed %d kB for a peak of %d; want both > 0, near the peak together",
			inv.ServePeakAnonKB, inv.ServePeakFileKB, inv.ServePeakRSSKB)
	}
	round := rep.Runs[0]
	if round.Retry.Count != count || len(round.Retry.ids) == 0 || round.ProxiedSat.Answered != count {
		t.Errorf("retry round: %d submits, %d ids compared, saturation answered %d; want %d, > 0, %d",
			round.Retry.Count, len(round.Retry.ids), round.ProxiedSat.Answered, count, count)
	}
	if r := round.ProxiedReceipts; r == nil || r.Receipts == nil || *r.Receipts == 0 {
		t.Errorf("proxied receipts run received no receipts: %+v", r)
	}
	p := rep.Preload
	if p == nil || p.Keys != preload || p.StartupSeconds <= 0 || p.PeakRSSKB <= 0 || p.RestartRSSKB <= 0 || p.PeakAnonKB <= 0 || p.PeakFileKB <= 0 {
		t.Fatalf("preload = %+v; want %d keys, start-up time, RSS and its parts > 0", p, preload)
	}
	assertReportPrints(t, rep)
}

// assertReportPrints checks that the table names its rows and that the
// JSON carries the invariants.
func assertReportPrints(t *testing.T, rep procReport) {
	t.Helper()
	var out bytes.Buffer
	printProcReport(&out, rep)
	for _, want := range []string{"fresh-key submits/s", "p99 at 2000/s offered", "retries of acknowledged keys/s", "receipts/s", "start to serving with 500 keys", "keys at the SMSC twice", "its file-backed part's peak"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no row %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "INVARIANTS BROKEN") {
		t.Errorf("table says the invariants are broken:\n%s", out.String())
	}
	out.Reset()
	if err := printProcReportJSON(&out, rep); err != nil {
		t.Fatal(err)
	}
	var back procReport
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Invariants.ProxiedAnswered != rep.Invariants.ProxiedAnswered || len(back.Rows) != len(rep.Rows) {
		t.Errorf("JSON round trip: %v; invariants %+v, %d rows", err, back.Invariants, len(back.Rows))
	}
}

// cancelOn is a progress writer that cancels a context once a line
// containing want is written.
type cancelOn struct {
	mu     sync.Mutex
	want   string
	cancel context.CancelFunc
	seen   bool
}

func (c *cancelOn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.seen && strings.Contains(string(b), c.want) {
		c.seen = true
		c.cancel()
	}
	return len(b), nil
}

// A bench cancelled in the middle of a run (Ctrl-C) returns an error and
// leaves no child process behind.
func TestCancelledProcessBenchStopsItsChildren(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := testProcOptions(t, 1000, 0)
	w := &cancelOn{want: "proxied, saturation", cancel: cancel}
	o.Progress = w
	rep, err := runProcessBench(ctx, o)
	if err == nil {
		t.Fatal("runProcessBench cancelled in a run: no error")
	}
	if !w.seen {
		t.Fatalf("the bench failed before the proxied run: %v", err)
	}
	if len(rep.Invariants.ChildPIDs) != 2 {
		t.Errorf("child pids %v, want the simulator's and the proxy's", rep.Invariants.ChildPIDs)
	}
	assertChildrenGone(t, rep.Invariants.ChildPIDs)
}

// With --postgres the proxy runs on the shared store in a schema of the
// bench's own, which is gone once the bench returns; the invariants hold.
func TestProcessBenchOnPostgresHoldsItsInvariantsAndDropsItsSchema(t *testing.T) {
	dsn := pgtest.DSN(t)
	if testing.Short() {
		t.Skip("subprocess test")
	}
	const count = 500
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := testProcOptions(t, count, 0)
	o.Postgres = dsn
	before := benchSchemas(ctx, t, dsn) // other benches' schemas are not this one's
	rep, err := runProcessBench(ctx, o)
	if err != nil {
		t.Fatalf("runProcessBench: %v", err)
	}
	assertChildrenGone(t, rep.Invariants.ChildPIDs)
	inv := rep.Invariants
	if inv.DuplicatesAtSMSC != 0 || inv.ChangedIDs != 0 || inv.ProxiedAnswered != inv.ProxiedSubmits || inv.ProxiedSubmits == 0 {
		t.Errorf("invariants %+v: want every proxied submit answered, none twice at the SMSC, no changed id", inv)
	}
	for name := range benchSchemas(ctx, t, dsn) {
		if !before[name] {
			t.Errorf("bench schema %s left in the database, want it dropped", name)
		}
	}
}

// benchSchemas is the set of the bench's schemas in the database at dsn.
func benchSchemas(ctx context.Context, t *testing.T, dsn string) map[string]bool {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench\_%'`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}
