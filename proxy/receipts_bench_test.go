package proxy

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/smpp"
)

// BenchmarkReceiptsThroughProxy measures the two halves of the receipts
// path through a proxy on a real Badger store, over loopback, apart from
// the submit rate (which bounds receipts/s in `smppproxy bench`, where
// every receipt follows a submit): b.N messages are submitted asking for
// a receipt while the ESME is bound transmitter only; then the simulator
// sends all their receipts at once, 1000 at a time ("intake": each
// answered once durably queued), and then four receiver binds take the
// queue ("delivery"). DLR_BENCH_WINDOW sets the account's dlr_window.
//
//	go test -run '^$' -bench ReceiptsThroughProxy -benchtime 20000x ./proxy/
func BenchmarkReceiptsThroughProxy(b *testing.B) {
	smsc := proxytest.StartSim(b, sim.Config{HexIDs: true})
	cfg := proxytest.Config(smsc.Addr(), b.TempDir())
	cfg.Upstreams[0].ResponseTimeout = config.Duration(10 * time.Second)
	if w, err := strconv.Atoi(os.Getenv("DLR_BENCH_WINDOW")); err == nil {
		cfg.Accounts[0].DLRWindow = w
	}
	app := proxytest.Run(b, func() (*App, error) { return New(Options{Config: cfg}) })
	tx := benchESME(b, app.Addr(), smpp.BindTransmitter)
	ids := benchSubmits(b, tx, b.N)

	b.ResetTimer()
	start := time.Now()
	limited(len(ids), 1000, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if st, err := smsc.SendReceipt(ctx, ids[i], "DELIVRD"); err != nil || st != 0 {
			b.Errorf("receipt %s: %v, %v", ids[i], st, err)
		}
	})
	intake := time.Since(start)

	start = time.Now()
	var got atomic.Int64
	all := make(chan struct{})
	for range 4 {
		rx := benchESME(b, app.Addr(), smpp.BindReceiver)
		go func() {
			for {
				select {
				case <-rx.Receipts():
					if got.Add(1) == int64(b.N) {
						close(all)
					}
				case <-rx.Done():
					return
				}
			}
		}()
	}
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%d of %d receipts delivered", got.Load(), b.N)
	}
	delivery := time.Since(start)
	b.ReportMetric(float64(b.N)/intake.Seconds(), "intake-receipts/s")
	b.ReportMetric(float64(b.N)/delivery.Seconds(), "delivered-receipts/s")
}

func benchESME(b *testing.B, addr string, bt smpp.BindType) *esme.Client {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := esme.Dial(ctx, addr, esme.Options{SystemID: proxytest.SystemID, Password: proxytest.Password, Bind: bt, Timeout: 30 * time.Second, Window: 100})
	if err != nil {
		b.Fatalf("bind %s: %v", bt, err)
	}
	b.Cleanup(c.Close)
	return c
}

// benchSubmits submits n messages asking for a receipt, 100 at a time,
// and returns their ids.
func benchSubmits(b *testing.B, tx *esme.Client, n int) []string {
	b.Helper()
	ids := make([]string, n)
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36)
	limited(n, 100, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		key := fmt.Sprintf("%s-%d", prefix, i)
		r, err := tx.Submit(ctx, esme.Submit{Src: "SHOP", Dst: fmt.Sprintf("4477%08d", i), Text: []byte("bench " + key), Key: key, RegisteredDelivery: 1})
		if err != nil || r.Status != 0 {
			b.Errorf("submit %d: %+v, %v", i, r, err)
			return
		}
		ids[i] = r.MessageID
	})
	return ids
}

// limited runs fn(i) for i in [0, n) in goroutines, at most limit at once.
func limited(n, limit int, fn func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
}
