package main

import (
	"context"
	"testing"
	"time"
)

// fakeTime is the pacer's clock in these tests: sleeping moves it on by
// exactly what was asked, and every sleep is recorded.
type fakeTime struct {
	t      time.Time
	sleeps []time.Duration
}

func (f *fakeTime) now() time.Time { return f.t }

func (f *fakeTime) sleep(_ context.Context, d time.Duration) {
	f.sleeps = append(f.sleeps, d)
	f.t = f.t.Add(d)
}

// A fixed offered rate starts at that rate: the second submit waits one
// interval, not a burst's worth of submits going out at once (a token
// bucket starting full sent the first 10% of a second's submits together,
// which made the p99 of the fixed-rate rows that of a saturation peak).
func TestPacedSubmitsStartWithoutABurst(t *testing.T) {
	ft := &fakeTime{t: time.Unix(1_000_000, 0)}
	p := newPacer(5000, ft.now, ft.sleep)
	start := ft.t
	for i := range 100 {
		if err := p.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := start.Add(time.Duration(i) * 200 * time.Microsecond)
		if !ft.t.Equal(want) {
			t.Fatalf("submit %d released at +%v, want +%v (5000/s: one every 200µs)", i, ft.t.Sub(start), want.Sub(start))
		}
	}
	if len(ft.sleeps) != 99 {
		t.Errorf("%d sleeps for 100 submits, want 99 (all but the first wait their turn)", len(ft.sleeps))
	}
}

// A wake-up that comes late (a coarse timer, a busy machine) is caught up
// at once: the submits due meanwhile go out without waiting, so the rate
// offered over the run stays the rate asked for.
func TestPacedSubmitsCatchUpALateWakeUp(t *testing.T) {
	ft := &fakeTime{t: time.Unix(1_000_000, 0)}
	p := newPacer(1000, ft.now, ft.sleep)
	start := ft.t
	if err := p.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	ft.t = ft.t.Add(10 * time.Millisecond) // 10 submits' worth late
	for i := 1; i <= 10; i++ {
		if err := p.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if len(ft.sleeps) != 0 {
		t.Errorf("slept %v while catching up; want no sleep for the 10 submits already due", ft.sleeps)
	}
	if err := p.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := ft.t.Sub(start), 11*time.Millisecond; got != want {
		t.Errorf("submit 11 released at +%v, want +%v: back on the schedule", got, want)
	}
}

// The pacer stops with its context: a cancelled run sends nothing more.
func TestPacerStopsWithItsContext(t *testing.T) {
	ft := &fakeTime{t: time.Unix(1_000_000, 0)}
	p := newPacer(10, ft.now, ft.sleep)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.wait(ctx); err == nil {
		t.Fatal("wait on a cancelled context returned nil; want its error")
	}
}

// Cancelling a run wakes a pacer that is waiting for the next submit's
// turn: at 0.01/s the second submit is due in 100 s, and the wait ends as
// soon as the context does.
func TestPacerWakesWhenCancelledWhileWaiting(t *testing.T) {
	p := newPacer(0.01, time.Now, sleepCtx)
	ctx, cancel := context.WithCancel(context.Background())
	if err := p.wait(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.wait(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("wait cancelled while sleeping returned nil; want the context's error")
		}
	case <-time.After(time.Minute):
		t.Fatal("wait did not return within a minute of its context's cancellation (its turn was 100 s away)")
	}
}
