package sim

import (
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/testkit"
)

// A dropped submit stays unanswered even when the simulator is closed
// under it: the client sees the connection end, never an ESME_RSYSERR
// (which a proxy would take for "temporary, not accepted").
func TestDroppedSubmitIsNeverAnsweredOnClose(t *testing.T) {
	for range 10 {
		s, err := Start("127.0.0.1:0", Config{Fault: func(Call) Action { return Action{Drop: true} }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := esme.Dial(ctx, s.Addr(), esme.Options{})
		if err != nil {
			t.Fatal(err)
		}
		res := c.SubmitAsync(ctx, esme.Submit{Dst: "1", Text: []byte("x"), Key: "k"})
		testkit.Eventually(t, 5*time.Second, func() bool { return s.Total() > 0 }, "the submit to reach the simulator")
		s.Close()
		r := <-res
		if r.Err == nil {
			t.Fatalf("dropped submit answered with %v on Close, want no answer", r.Resp.Status)
		}
		c.Close()
		cancel()
	}
}

// Per-key counts and duplicates are what tests assert on.
func TestCountsPerKey(t *testing.T) {
	s, err := Start("127.0.0.1:0", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := esme.Dial(ctx, s.Addr(), esme.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, k := range []string{"a", "b", "a"} {
		if r, err := c.Submit(ctx, esme.Submit{Dst: "1", Text: []byte("x"), Key: k}); err != nil || r.Status != 0 {
			t.Fatalf("submit %s: %v %v", k, r.Status, err)
		}
	}
	if s.Count("a") != 2 || s.Count("b") != 1 || s.Total() != 3 || s.TotalAccepted() != 3 {
		t.Errorf("counts a=%d b=%d total=%d accepted=%d, want 2 1 3 3", s.Count("a"), s.Count("b"), s.Total(), s.TotalAccepted())
	}
	if d := s.Duplicates(); len(d) != 1 || d["a"] != 2 {
		t.Errorf("Duplicates() = %v, want map[a:2]", d)
	}
}
