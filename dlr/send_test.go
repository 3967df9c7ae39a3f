package dlr

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// Several deliver_sm await their answer on a session at once, yet the
// session gets them in queue order: the dispatcher starts a Send only once
// the previous one has returned, however long the session takes to queue.
func TestDispatcherKeepsQueueOrderInWindow(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DeliverWindow = 5 })
	want := queueReceipts(t, e, 40)
	rx := &fakeRx{
		id:         "s",
		queueDelay: func(int) time.Duration { return time.Duration(rand.IntN(1000)) * time.Microsecond },
		respDelay:  func(int) time.Duration { return 20 * time.Millisecond },
	}
	e.rcv.bind("shop", rx)
	e.svc.kick("shop")
	waitFor(t, "all acknowledged", queueEmpty(e))
	if got := rx.received(); !slices.Equal(got, want) {
		t.Errorf("session got %v, want the queue order %v", got, want)
	}
	if rx.overlap.Load() {
		t.Errorf("a Send started before the previous one had returned")
	}
	if p := rx.peak.Load(); p < 2 || p > 5 {
		t.Errorf("at most %d deliver_sm awaited their answer at once, want 2 to 5 (the window)", p)
	}
	if got := e.svc.Count(DelAcked); got != 40 {
		t.Errorf("Count(acked) = %d, want 40", got)
	}
}

// Each way a deliver_sm can end is counted as its outcome, and the entry
// is then delivered again.
func TestDeliveryOutcomes(t *testing.T) {
	errNoAnswer := errors.New("no answer")
	for _, tc := range []struct {
		name    string
		rx      func() *fakeRx
		outcome string
	}{
		{"refused", func() *fakeRx {
			return &fakeRx{id: "s", answer: func(n int) (smpp.Status, error) {
				if n == 1 {
					return smpp.StatusThrottled, nil
				}
				return smpp.StatusOK, nil
			}}
		}, DelRefused},
		{"a generic_nack of status 0", func() *fakeRx {
			return &fakeRx{id: "s", nack: func(n int) bool { return n == 1 }}
		}, DelRefused},
		{"unanswered", func() *fakeRx {
			return &fakeRx{id: "s", answer: func(n int) (smpp.Status, error) {
				if n == 1 {
					return 0, errNoAnswer
				}
				return smpp.StatusOK, nil
			}}
		}, DelTimeout},
		{"not queued within dlr_redelivery", func() *fakeRx {
			return &fakeRx{id: "s", queueDelay: func(call int) time.Duration {
				if call == 1 {
					return time.Minute
				}
				return 0
			}}
		}, DelTimeout},
		{"session ends awaiting the answer", func() *fakeRx {
			rx := &fakeRx{id: "s", done: make(chan struct{})}
			rx.answer = func(n int) (smpp.Status, error) {
				close(rx.done)
				return 0, errNoAnswer
			}
			return rx
		}, DelLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			queueReceipts(t, e, 1)
			rx := tc.rx()
			e.rcv.bind("shop", rx)
			e.svc.kick("shop")
			waitFor(t, tc.outcome+" counted", func() bool { return e.svc.Count(tc.outcome) == 1 })
			if rx.ended() {
				e.rcv.bind("shop", rx, &fakeRx{id: "t"})
				e.svc.kick("shop")
			}
			waitFor(t, "delivered again and acknowledged", queueEmpty(e))
			// The delivery is counted once its Ack is written: after the
			// queue is seen empty.
			waitFor(t, "the acknowledged delivery counted", func() bool { return e.svc.Count(DelAcked) >= 1 })
			if got := e.svc.Count(DelAcked); got != 1 {
				t.Errorf("Count(acked) = %d, want 1", got)
			}
			for _, o := range []string{DelRefused, DelTimeout, DelLost} {
				want := uint64(0)
				if o == tc.outcome {
					want = 1
				}
				if got := e.svc.Count(o); got != want {
					t.Errorf("Count(%s) = %d, want %d", o, got, want)
				}
			}
		})
	}
}
