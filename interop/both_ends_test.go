package interop

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	fsmpp "github.com/fiorix/go-smpp/smpp"
	"github.com/fiorix/go-smpp/smpp/pdu/pdutext"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

// Test 3: fiorix at both ends, the proxy in between. Two fiorix
// Transceivers send 200 submit_sm through 20 concurrent workers: 160 keys,
// and 40 duplicates of them, half sent right behind their original (still
// in flight: joined) and half well after it (replayed). Odd keys are UCS-2
// (data_coding 0x08), even ones raw (0x00). smpptest answers every submit
// and sends a receipt right after each response.
func TestFiorixBothEnds(t *testing.T) {
	const (
		keys    = 160
		workers = 20
	)
	smsc := startFiorixSMSC(t, smscOptions{receipts: true})
	reg := prometheus.NewRegistry()
	app := startProxyMetrics(t, testConfig(t, smsc.Addr()), reg)
	sink := newReceiptSink()
	clients := []*fsmpp.Transceiver{dialFiorix(t, app.Addr(), sink), dialFiorix(t, app.Addr(), sink)}

	// The plan, in send order: one key in 8 is followed by a duplicate of
	// the key just before it (likely still in flight), another one in 8
	// by a duplicate of a key 30 back (answered long ago).
	var plan []int
	for k := range keys {
		plan = append(plan, k)
		switch {
		case k%8 == 1:
			plan = append(plan, k-1)
		case k%8 == 5 && k >= 30:
			plan = append(plan, k-30)
		case k%8 == 5:
			plan = append(plan, k-4)
		}
	}
	if len(plan) != 200 {
		t.Fatalf("plan of %d submits, want 200", len(plan))
	}
	text := func(k int) pdutext.Codec {
		s := fmt.Sprintf("message %03d", k)
		if k%2 == 1 {
			return pdutext.UCS2(s)
		}
		return pdutext.Raw(s)
	}

	type result struct {
		key int
		id  string
		err error
	}
	work := make(chan int)
	results := make(chan result, len(plan))
	var wg sync.WaitGroup
	for w := range workers {
		tc := clients[w%len(clients)]
		wg.Go(func() {
			for k := range work {
				sm, err := tc.Submit(keyed(fmt.Sprintf("k%03d", k), text(k)))
				r := result{key: k, err: err}
				if sm != nil {
					r.id = sm.RespID()
				}
				results <- r
			}
		})
	}
	start := time.Now()
	for _, k := range plan {
		work <- k
	}
	close(work)
	wg.Wait()
	close(results)
	t.Logf("200 submits in %v", time.Since(start).Round(time.Millisecond))

	idsOf := map[int]map[string]bool{}
	byID := map[string]int{}
	for r := range results {
		if r.err != nil {
			t.Errorf("submit k%03d: %v", r.key, r.err)
			continue
		}
		if idsOf[r.key] == nil {
			idsOf[r.key] = map[string]bool{}
		}
		idsOf[r.key][r.id] = true
		byID[r.id] = r.key
	}
	for k := range keys {
		if len(idsOf[k]) != 1 {
			t.Errorf("key k%03d got message ids %v, want exactly one", k, idsOf[k])
		}
	}
	if len(byID) != keys {
		t.Errorf("%d distinct message ids, want %d", len(byID), keys)
	}

	// The proxy's own account of it: 160 forwarded, 40 answered from the
	// store (replayed) or from the owner's result (joined).
	outcome := func(o string) float64 {
		return counter(t, reg, "smppproxy_dedup_submits_total", map[string]string{"account": "shop", "outcome": o})
	}
	fwd, rep, join := outcome("forwarded"), outcome("replayed"), outcome("joined")
	t.Logf("forwarded %v, replayed %v, joined %v", fwd, rep, join)
	if fwd != keys || rep+join != float64(len(plan)-keys) {
		t.Errorf("proxy counted forwarded %v, replayed %v + joined %v; want %d and %d", fwd, rep, join, keys, len(plan)-keys)
	}

	// smpptest: each key once, as sent, without the key TLV.
	subs := smsc.Submits()
	if len(subs) != keys {
		t.Errorf("smpptest received %d submit_sm, want %d", len(subs), keys)
	}
	seen := map[string]int{}
	for _, s := range subs {
		k, ok := byID[s.messageID]
		if !ok {
			t.Errorf("smpptest issued %s, which no client was given", s.messageID)
			continue
		}
		seen[s.messageID]++
		want := text(k)
		if s.dataCoding != byte(want.Type()) || string(s.shortMessage) != string(want.Encode()) {
			t.Errorf("k%03d reached smpptest as data_coding 0x%02X % X, want 0x%02X % X",
				k, s.dataCoding, s.shortMessage, byte(want.Type()), want.Encode())
		}
		if _, ok := s.tlvs[keyTag]; ok {
			t.Errorf("k%03d reached smpptest with the key TLV", k)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message %s submitted to smpptest %d times", id, n)
		}
	}

	// Receipts: one per message reaches one of the fiorix clients, with the
	// id that client was given (at-least-once to the ESME: a redelivery
	// would be a duplicate id here, tolerated but logged).
	got := map[string]int{}
	deadline := time.After(5 * time.Second)
	for len(got) < len(byID) {
		select {
		case d := <-sink.ch:
			got[d.receiptedID]++
			if _, ok := byID[d.receiptedID]; !ok {
				t.Errorf("a receipt for %q, which no client was given", d.receiptedID)
			}
		case <-deadline:
			var missing []string
			for id := range byID {
				if got[id] == 0 {
					missing = append(missing, id)
				}
			}
			sort.Strings(missing)
			t.Fatalf("%d of %d receipts reached the fiorix clients; missing %v", len(got), len(byID), missing)
		}
	}
	for id, n := range got {
		if n > 1 {
			t.Logf("receipt for %s delivered %d times", id, n)
		}
	}
	if !testkit.Poll(2*time.Second, func() bool { sent, ok := smsc.Acked(); return sent == keys && ok == keys }) {
		sent, ok := smsc.Acked()
		t.Errorf("smpptest sent %d receipts, %d answered with status 0; want %d, %d", sent, ok, keys, keys)
	}
}
