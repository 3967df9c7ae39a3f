package main

import (
	"fmt"
	"regexp"
	"sort"
	"sync"
	"time"
)

// receiptLatency measures, per message id, the time from the
// submit_sm_resp that issued it to the receipt that names it. A receipt
// may overtake its answer's bookkeeping (the SMSC sends it at once): the
// first of the two to arrive waits for the other.
type receiptLatency struct {
	mu    sync.Mutex
	resp  map[string]time.Time // id → when its submit was answered (the first time)
	early map[string]time.Time // id → when its receipt came, before the answer was noted
	lat   []time.Duration
}

func newReceiptLatency() *receiptLatency {
	return &receiptLatency{resp: map[string]time.Time{}, early: map[string]time.Time{}}
}

// answered notes that a submit was accepted with id at t. A replayed
// answer (the proxy's, for a retried key) keeps the first time.
func (l *receiptLatency) answered(id string, t time.Time) {
	if l == nil || id == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.resp[id]; ok {
		return
	}
	l.resp[id] = t
	if at, ok := l.early[id]; ok {
		delete(l.early, id)
		l.lat = append(l.lat, max(0, at.Sub(t)))
	}
}

// received notes a receipt for id at t.
func (l *receiptLatency) received(id string, t time.Time) {
	if l == nil || id == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if at, ok := l.resp[id]; ok {
		l.lat = append(l.lat, t.Sub(at))
		return
	}
	l.early[id] = t
}

// result is the latency percentiles and how many receipts matched an
// answered submit.
func (l *receiptLatency) result() (latencies, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return percentiles(append([]time.Duration(nil), l.lat...)), len(l.lat)
}

var sequenceNumber = regexp.MustCompile(`sequence \d+`)

// errorKind is an error's text with its sequence number left out, so that
// one cause is counted once.
func errorKind(err error) string {
	return sequenceNumber.ReplaceAllString(err.Error(), "sequence N")
}

// errorLines lists the n most frequent error kinds as "N× text", then how
// many other kinds there were.
func errorLines(counts map[string]int, n int) []string {
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		return counts[kinds[i]] > counts[kinds[j]] || counts[kinds[i]] == counts[kinds[j]] && kinds[i] < kinds[j]
	})
	var out []string
	for i, k := range kinds {
		if i == n {
			out = append(out, fmt.Sprintf("… and %d other kind(s) of error", len(kinds)-n))
			break
		}
		out = append(out, fmt.Sprintf("%d× %s", counts[k], k))
	}
	return out
}
