package dlr

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/state"
)

// Receipts through the service on a real Badger store on disk (every
// write durable), without the network: the proxy's share of the receipts
// path. `go test -run '^$' -bench Receipt ./dlr/`
//
// BenchmarkReceiptIntake: receipts of accepted messages handed to
// OnDeliver by as many goroutines at once as an upstream's deliver_window
// lets run (each returns once the receipt is durably queued).
// BenchmarkReceiptDelivery: a queue of receipts delivered to four bound
// sessions that answer at once. BenchmarkReceiptThrough: both at once, as
// in production: receipts handed to OnDeliver (window goroutines of an
// upstream, 100) while four sessions are bound, until each is
// acknowledged. BenchmarkKeptReceiptsMatched: receipts
// that overtook their submit_sm_resp (kept), matched once their records
// are accepted. DLR_BENCH_WINDOW sets Config.DeliverWindow (default 10).

var benchWindow, _ = strconv.Atoi(os.Getenv("DLR_BENCH_WINDOW"))

func benchEnv(b *testing.B, rcv *fakeRcv) (*Service, *state.BadgerStore) {
	b.Helper()
	st, err := state.OpenBadger(state.BadgerOptions{Path: b.TempDir(), MinFreeBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	var commits, ops atomic.Int64
	var took atomic.Int64
	st.SetCommitObserver(func(n int, d time.Duration) { commits.Add(1); ops.Add(int64(n)); took.Add(int64(d)) })
	b.Cleanup(func() {
		if n := commits.Load(); n > 0 {
			b.Logf("%d group commits, %.0f writes and %v each on average", n, float64(ops.Load())/float64(n), time.Duration(took.Load()/n))
		}
	})
	svc, err := New(Config{
		Store: st, IDs: testIDs, Receivers: rcv,
		Accounts:  map[string]Account{"shop": {Redelivery: 10 * time.Second, Route: []string{"smsc"}}},
		Upstreams: map[string]Upstream{"smsc": {}}, DeliverWindow: benchWindow,
	})
	if err != nil {
		b.Fatal(err)
	}
	svc.Start()
	b.Cleanup(svc.Close)
	return svc, st
}

// parallel runs fn(i) for i in [0, n) on workers goroutines.
func parallel(n, workers int, fn func(i int)) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// benchAccept stores n accepted records of shop, ids 1000+i (hex).
func benchAccept(b *testing.B, st state.Store, n int) {
	b.Helper()
	now := time.Now()
	parallel(n, 256, func(i int) {
		id := fmt.Sprintf("%x", 1000+i)
		r := &state.Record{
			Key: state.Key{Account: "shop", Key: fmt.Sprint("k", i)}, State: state.Accepted, Upstream: "smsc",
			MessageID: id, NormID: testIDs.NormalizeID("smsc", id),
			Created: now, Updated: now, Expires: now.Add(time.Hour),
		}
		if _, _, err := st.Create(bg, r); err != nil {
			b.Error(err)
		}
	})
}

// benchDeliver hands the receipts of ids 1000+i, i in [0, n), to OnDeliver
// from window goroutines.
func benchDeliver(b *testing.B, svc *Service, n, window int) {
	b.Helper()
	parallel(n, window, func(i int) {
		d := smppclient.Delivery{Upstream: "smsc", Session: "smsc/1", Frame: dlrFrame(fmt.Sprint(1000+i), "DELIVRD")}
		if st := svc.OnDeliver(bg, d); st != 0 {
			b.Errorf("receipt %d answered %v", i, st)
		}
	})
}

// timing is when a measured phase started, in wall clock and process CPU.
type timing struct {
	wall time.Time
	cpu  time.Duration
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startTiming(b *testing.B) timing {
	b.ResetTimer()
	return timing{wall: time.Now(), cpu: cpuTime()}
}

// report gives the rate of n receipts since t and the CPU each took (a
// figure a busy machine disturbs less than the rate).
func (t timing) report(b *testing.B, n int) {
	b.ReportMetric(float64(n)/time.Since(t.wall).Seconds(), "receipts/s")
	b.ReportMetric(float64((cpuTime()-t.cpu).Microseconds())/float64(n), "cpu-µs/receipt")
}

func BenchmarkReceiptIntake(b *testing.B) {
	svc, st := benchEnv(b, &fakeRcv{})
	benchAccept(b, st, b.N)
	t := startTiming(b)
	benchDeliver(b, svc, b.N, 1000)
	t.report(b, b.N)
}

func BenchmarkReceiptDelivery(b *testing.B) {
	rcv := &fakeRcv{}
	svc, st := benchEnv(b, rcv)
	benchAccept(b, st, b.N)
	benchDeliver(b, svc, b.N, 1000)
	rxs := []*fakeRx{{id: "s1"}, {id: "s2"}, {id: "s3"}, {id: "s4"}}
	t := startTiming(b)
	rcv.bind("shop", rxs...)
	svc.kick("shop")
	testkit.Eventually(b, time.Minute, func() bool { return svc.Count(DelAcked) >= uint64(b.N) }, "all delivered")
	t.report(b, b.N)
}

func BenchmarkReceiptThrough(b *testing.B) {
	rcv := &fakeRcv{}
	svc, st := benchEnv(b, rcv)
	benchAccept(b, st, b.N)
	rcv.bind("shop", &fakeRx{id: "s1"}, &fakeRx{id: "s2"}, &fakeRx{id: "s3"}, &fakeRx{id: "s4"})
	svc.kick("shop")
	t := startTiming(b)
	benchDeliver(b, svc, b.N, 100)
	testkit.Eventually(b, time.Minute, func() bool { return svc.Count(DelAcked) >= uint64(b.N) }, "all delivered")
	t.report(b, b.N)
}

func BenchmarkKeptReceiptsMatched(b *testing.B) {
	svc, st := benchEnv(b, &fakeRcv{})
	benchDeliver(b, svc, b.N, 1000)
	t := startTiming(b)
	benchAccept(b, st, b.N)
	svc.rec.kick()
	testkit.Eventually(b, time.Minute, func() bool { return svc.Count(OutMatchedLater) >= uint64(b.N) }, "all matched")
	t.report(b, b.N)
}
