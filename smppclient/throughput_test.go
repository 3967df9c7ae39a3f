package smppclient

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The upstream's throughput cap holds under concurrent submits: the pool
// never grants more tokens than burst + rate × the time its clock says
// passed. rate.Limiter counts an interval twice when one caller hands it
// a time older than another caller's, so the pool reads its clock and
// calls the limiter under one lock.
func TestThroughputCapHoldsUnderConcurrentSubmits(t *testing.T) {
	const perSecond = 50
	var ticks atomic.Int64 // every clock read is 1ms later than the last
	start := time.Unix(1000, 0)
	now := func() time.Time { return start.Add(time.Duration(ticks.Add(1)) * time.Millisecond) }
	p := New(Config{Name: "smsc", Address: "127.0.0.1:1", SystemID: "x", Throughput: perSecond, Now: now})

	var granted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				// A deadline in the past: only a token due now is taken,
				// nothing waits.
				if p.takeToken(context.Background(), time.Time{}) == nil {
					granted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Duration(ticks.Load()) * time.Millisecond
	limit := int64(burst(perSecond)) + int64(perSecond*elapsed.Seconds()) + 1
	if got := granted.Load(); got > limit || got == 0 {
		t.Errorf("granted %d tokens in %v of clock at %d/s, want 1..%d", got, elapsed, perSecond, limit)
	}
}
