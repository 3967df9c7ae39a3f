package dedup

import (
	"strconv"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// BenchmarkSubmitFresh is the engine's own cost per fresh key (an
// in-memory store and a forwarder that accepts at once): what it adds to
// a submit besides the store's durable writes.
func BenchmarkSubmitFresh(b *testing.B) {
	e := New(Config{Store: state.NewMem(nil), Forwarder: &fakeForwarder{}, InstanceID: "bench"})
	defer e.Close()
	subs := make([]*smpp.Submit, b.N)
	for i := range subs {
		subs[i] = submit(b, "fresh-"+strconv.Itoa(i), "your code is 123456")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, s := range subs {
		if a := e.Submit(ctx, "shop", Policy{}, s); a.Outcome != OutForwarded {
			b.Fatal(a.Outcome)
		}
	}
}

// BenchmarkSubmitReplay is the cost of a retry of an accepted key.
func BenchmarkSubmitReplay(b *testing.B) {
	e := New(Config{Store: state.NewMem(nil), Forwarder: &fakeForwarder{}, InstanceID: "bench"})
	defer e.Close()
	s := submit(b, "again", "your code is 123456")
	e.Submit(ctx, "shop", Policy{}, s)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if a := e.Submit(ctx, "shop", Policy{}, s); a.Outcome != OutReplayed {
			b.Fatal(a.Outcome)
		}
	}
}
