package dlr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// Retry schedule of an unmatched receipt: the first try this long after it
// was kept (its submit_sm_resp may be a moment behind), then doubling up to
// retryMax. maxScan bounds the entries read per upstream and pass.
const (
	retryFirst = 200 * time.Millisecond
	retryMax   = 5 * time.Minute
	maxScan    = 5000
	scanPage   = 500
)

// reconciler matches kept (unmatched) receipts again: by id, by the echoed
// key TLV, or by addresses against unknown records (SPEC §5).
type reconciler struct {
	s     *Service
	kickc chan struct{}

	mu        sync.Mutex
	upstreams map[string]bool   // upstreams whose unmatched queue may be non-empty
	next      map[uint64]retry  // entry seq → schedule
	nextUp    map[uint64]string // entry seq → its upstream
	cursor    map[string]uint64 // upstream → where the last pass stopped
}

type retry struct {
	at    time.Time
	delay time.Duration
}

func newReconciler(s *Service) *reconciler {
	return &reconciler{s: s, kickc: make(chan struct{}, 1), upstreams: map[string]bool{}, next: map[uint64]retry{}, nextUp: map[uint64]string{}, cursor: map[string]uint64{}}
}

// note tells the reconciler that upstreams have unmatched receipts.
func (c *reconciler) note(upstreams ...string) {
	if len(upstreams) == 0 {
		return
	}
	c.mu.Lock()
	for _, u := range upstreams {
		c.upstreams[u] = true
	}
	c.mu.Unlock()
	select {
	case c.kickc <- struct{}{}:
	default:
	}
}

func (c *reconciler) run() {
	due := time.Now().Add(retryFirst)
	t := time.NewTimer(retryFirst)
	defer t.Stop()
	depths := time.NewTicker(time.Minute)
	defer depths.Stop()
	reset := func(d time.Duration) {
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		due = time.Now().Add(d)
		t.Reset(d)
	}
	for {
		select {
		case <-c.s.ctx.Done():
			return
		case <-c.kickc:
			if time.Until(due) > retryFirst {
				reset(retryFirst)
			}
		case <-depths.C:
			c.s.refreshDepths()
		case <-t.C:
			reset(c.pass())
		}
	}
}

// pass tries every due unmatched receipt once and returns when to run
// again.
func (c *reconciler) pass() time.Duration {
	c.mu.Lock()
	ups := make([]string, 0, len(c.upstreams))
	for u := range c.upstreams {
		ups = append(ups, u)
	}
	c.mu.Unlock()
	slices.Sort(ups)
	wait := retryMax
	for _, up := range ups {
		wait = min(wait, c.passUpstream(up))
	}
	return max(wait, 10*time.Millisecond)
}

// passUpstream reads at most maxScan entries of up's unmatched queue,
// from where the previous pass stopped, and tries the due ones.
func (c *reconciler) passUpstream(up string) time.Duration {
	ctx := c.s.ctx
	q := unmatchedQueue(up)
	wait := retryMax
	c.mu.Lock()
	start := c.cursor[up]
	c.mu.Unlock()
	after, read := start, 0
	seen := map[uint64]bool{}
	for {
		es, err := c.s.q.List(ctx, q, after, scanPage)
		if err != nil {
			return time.Second
		}
		read += len(es)
		for _, e := range es {
			after = e.Seq
			seen[e.Seq] = true
			wait = min(wait, c.try(ctx, up, e))
		}
		if len(es) < scanPage { // the end of the queue
			after = 0
			break
		}
		if read >= maxScan {
			wait = min(wait, retryFirst) // more to read
			break
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cursor[up] = after
	if start == 0 && after == 0 {
		// A whole scan: forget the schedule of entries no longer there.
		for seq := range c.next {
			if !seen[seq] && c.nextUp[seq] == up {
				delete(c.next, seq)
				delete(c.nextUp, seq)
			}
		}
		if read == 0 {
			delete(c.upstreams, up) // empty until the next note
		}
	}
	return wait
}

// try attempts one entry if it is due and returns how long until it is
// due next (retryMax once settled).
func (c *reconciler) try(ctx context.Context, up string, e *state.QueueEntry) time.Duration {
	now := time.Now()
	c.mu.Lock()
	r, ok := c.next[e.Seq]
	if !ok {
		r = retry{at: now, delay: retryFirst}
	}
	c.mu.Unlock()
	if now.Before(r.at) {
		return r.at.Sub(now)
	}
	settled, err := c.attempt(ctx, up, e)
	c.mu.Lock()
	defer c.mu.Unlock()
	if settled {
		delete(c.next, e.Seq)
		delete(c.nextUp, e.Seq)
		return retryMax
	}
	if err != nil {
		c.s.log.Warn("dlr: matching a kept receipt", "upstream", up, "receipt_id", e.MessageID, "err", err)
	}
	r.delay = min(2*r.delay, retryMax)
	r.at = now.Add(r.delay)
	c.next[e.Seq], c.nextUp[e.Seq] = r, up
	return r.delay
}

// attempt matches one kept receipt; settled once it has been routed and
// removed from the unmatched queue.
func (c *reconciler) attempt(ctx context.Context, up string, e *state.QueueEntry) (bool, error) {
	s := c.s
	m, err := parseMessage(smpp.EncodeSimple(e.Command, smpp.StatusOK, 0, e.Body))
	if err != nil {
		return false, err
	}
	r := readReceipt(m)
	rec, outcome, err := c.find(ctx, up, r, e)
	if err != nil || rec == nil {
		return false, err
	}
	out, err := s.route(ctx, up, rec, r)
	if err != nil {
		return false, err
	}
	if out != OutDuplicate {
		out = outcome
	}
	if err := s.q.Ack(ctx, e.Queue, e.Seq); err != nil {
		return false, fmt.Errorf("dlr: receipt routed but still listed as unmatched: %w", err)
	}
	s.m.received(rec.Key.Account, up, out)
	s.log.Info("dlr: kept receipt matched", "upstream", up, "receipt_id", r.id, "stat", r.stat, "outcome", out,
		"account", rec.Key.Account, "key", rec.Key.Key, "segment", rec.Key.Segment, "message_id", rec.ClientMessageID())
	return true, nil
}

// find looks for the record of a kept receipt: by id (the record was
// accepted since), by the echoed key TLV, or as the only unknown record of
// the upstream with the receipt's addresses and time. A record found by
// the last two while unknown is resolved to accepted with the receipt's
// id first.
func (c *reconciler) find(ctx context.Context, up string, r *receipt, e *state.QueueEntry) (*state.Record, string, error) {
	s := c.s
	rec, err := s.match(ctx, up, r)
	if err == nil {
		return rec, OutMatchedLater, nil
	}
	if !errors.Is(err, state.ErrNotFound) {
		return nil, "", err
	}
	res := s.resolver()
	if r.id == "" || res == nil {
		return nil, "", nil
	}
	respID := s.ids.RespIDFromReceipt(up, r.id)
	if tag := s.cfg.Upstreams[up].EchoTLV; tag != 0 {
		if v, ok := r.m.tlv(tag); ok && len(bytes.TrimRight(v, "\x00")) > 0 {
			for name, a := range s.cfg.Accounts {
				if !slices.Contains(a.Route, up) {
					continue
				}
				k := state.Key{Account: name, Key: dedup.KeyOfTLV(v)}
				rec, err := s.cfg.Store.Get(ctx, k)
				if err != nil || rec.Upstream != up {
					continue
				}
				if rec.State == state.Unknown {
					why := fmt.Sprintf("upstream %s echoed the key in TLV 0x%04X of receipt %s (stat %s)", up, tag, r.id, orDash(r.stat))
					if rec, err = res.ResolveFromReceipt(ctx, k, up, respID, why); err != nil {
						return nil, "", err
					}
				}
				if rec.MessageID != "" {
					return rec, OutReconciled, nil
				}
			}
		}
	}
	cands, err := s.cfg.Store.UnknownByAddr(ctx, up, state.HashAddrs(r.m.dst, r.m.src))
	if err != nil {
		return nil, "", err
	}
	var in []*state.Record
	for _, rec := range cands {
		if c.inWindow(rec, r, e) {
			in = append(in, rec)
		}
	}
	if len(in) != 1 {
		if len(in) > 1 {
			s.log.Info("dlr: kept receipt matches several unknown records; not resolved", "upstream", up, "receipt_id", r.id, "candidates", len(in))
		}
		return nil, "", nil
	}
	why := fmt.Sprintf("unmatched receipt %s (stat %s) from %s matched the only unknown record with its source, destination and submit time", r.id, orDash(r.stat), up)
	rec, err = res.ResolveFromReceipt(ctx, in[0].Key, up, respID, why)
	if err != nil {
		if errors.Is(err, dedup.ErrNotUnknown) {
			return nil, "", nil // settled otherwise meanwhile; the next try sees it
		}
		return nil, "", err
	}
	return rec, OutReconciled, nil
}

// inWindow reports whether rec may be the message receipt r (kept as e)
// reports on, by time: created before the receipt arrived, and within
// ReconcileWindow of its submit date (read as UTC or local time), or,
// without a submit date, within the account's retention.
func (c *reconciler) inWindow(rec *state.Record, r *receipt, e *state.QueueEntry) bool {
	if rec.Created.After(e.Enqueued) {
		return false
	}
	w := c.s.cfg.ReconcileWindow
	near := func(t time.Time) bool { d := rec.Created.Sub(t); return d <= w && d >= -w }
	tu, ok := r.text.SubmitTime(time.UTC)
	if !ok {
		return !rec.Created.Before(e.Enqueued.Add(-c.s.account(rec.Key.Account).Retention))
	}
	tl, _ := r.text.SubmitTime(time.Local)
	return near(tu) || near(tl)
}

// UnmatchedReceipt describes a kept receipt for inspection (never its
// text).
type UnmatchedReceipt struct {
	Upstream  string    `json:"upstream"`
	Seq       uint64    `json:"seq"`
	MessageID string    `json:"message_id"` // as the upstream wrote it in the receipt
	Stat      string    `json:"stat"`
	Received  time.Time `json:"received"`
	Expires   time.Time `json:"expires"`
}

// Unmatched lists up to limit kept receipts of upstream ("" = every
// configured upstream), oldest first per upstream.
func (s *Service) Unmatched(ctx context.Context, upstream string, limit int) ([]UnmatchedReceipt, error) {
	ups := []string{upstream}
	if upstream == "" {
		ups = ups[:0]
		for u := range s.cfg.Upstreams {
			ups = append(ups, u)
		}
		slices.Sort(ups)
	}
	var out []UnmatchedReceipt
	for _, u := range ups {
		es, err := s.q.List(ctx, unmatchedQueue(u), 0, limit-len(out))
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			out = append(out, UnmatchedReceipt{Upstream: u, Seq: e.Seq, MessageID: e.MessageID, Stat: e.Stat, Received: e.Enqueued, Expires: e.Expires})
		}
	}
	return out, nil
}
