package dlr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// Retry schedule of an unmatched receipt: the first try this long after it
// was kept (its submit_sm_resp may be a moment behind), then doubling up to
// retryMax. maxScan bounds the entries read per upstream and pass.
const (
	retryFirst = 200 * time.Millisecond
	// retryYoung bounds the delay between the tries of a receipt kept for
	// less than its upstream's settle delay.
	retryYoung = 500 * time.Millisecond
	retryMax   = 5 * time.Minute
	maxScan    = 5000
	scanPage   = 500
)

// settleMargin is added to an upstream's response_timeout to give the
// settle delay (see Upstream.ResponseTimeout): time for a record whose
// response timed out to be written unknown.
const settleMargin = time.Second

// reconciler matches kept (unmatched) receipts again: by id, by the echoed
// key TLV, or by addresses against unknown records (SPEC §5).
//
// A pass reads at most maxScan entries of an upstream's queue from where
// the previous one stopped (its cursor); the passes from the head of the
// queue to its end make a cycle. Every schedule is marked with the cycle
// that last listed its entry, and at the end of a cycle the schedules
// that cycle did not list (entries expired or settled) are forgotten.
type reconciler struct {
	s     *Service
	kickc chan struct{}

	mu        sync.Mutex
	upstreams map[string]bool   // upstreams whose unmatched queue may be non-empty
	next      map[uint64]retry  // entry seq → schedule
	nextUp    map[uint64]string // entry seq → its upstream
	cursor    map[string]uint64 // upstream → where the last pass stopped
	cycle     map[string]uint64 // upstream → the current cycle
	// noted counts note calls per upstream; listed is its value before
	// the last List that reached the end of the queue. While they differ,
	// the queue may hold entries never tried (and so due at once).
	noted, listed map[string]uint64
}

type retry struct {
	at    time.Time
	delay time.Duration
	cycle uint64 // the last cycle that listed the entry
}

func newReconciler(s *Service) *reconciler {
	return &reconciler{s: s, kickc: make(chan struct{}, 1), upstreams: map[string]bool{}, next: map[uint64]retry{}, nextUp: map[uint64]string{},
		cursor: map[string]uint64{}, cycle: map[string]uint64{}, noted: map[string]uint64{}, listed: map[string]uint64{}}
}

// note tells the reconciler that upstreams have new unmatched receipts.
func (c *reconciler) note(upstreams ...string) {
	if len(upstreams) == 0 {
		return
	}
	c.mu.Lock()
	for _, u := range upstreams {
		c.upstreams[u] = true
		c.noted[u]++
	}
	c.mu.Unlock()
	c.kick()
}

// noteKnown tells the reconciler that upstreams have unmatched receipts
// (the periodic depth refresh): only those it does not track yet are
// noted, so the refresh does not make it read whole queues every minute.
func (c *reconciler) noteKnown(upstreams ...string) {
	var fresh []string
	c.mu.Lock()
	for _, u := range upstreams {
		if !c.upstreams[u] {
			fresh = append(fresh, u)
		}
	}
	c.mu.Unlock()
	c.note(fresh...)
}

func (c *reconciler) kick() {
	select {
	case c.kickc <- struct{}{}:
	default:
	}
}

func (c *reconciler) run() {
	now := c.s.now
	due := now().Add(retryFirst)
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
		due = now().Add(d)
		t.Reset(d)
	}
	for {
		select {
		case <-c.s.ctx.Done():
			return
		case <-c.kickc:
			if due.Sub(now()) > retryFirst {
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
// from where the previous pass stopped, tries the due ones, and returns
// how long until one of up's kept receipts is due.
func (c *reconciler) passUpstream(up string) time.Duration {
	ctx := c.s.ctx
	q := unmatchedQueue(up)
	c.mu.Lock()
	start, cyc := c.cursor[up], c.cycle[up]
	c.mu.Unlock()
	after, read := start, 0
	var noted uint64
	end := false
	for {
		c.mu.Lock()
		noted = c.noted[up]
		c.mu.Unlock()
		es, err := c.s.q.List(ctx, q, after, scanPage)
		if err != nil {
			return time.Second
		}
		read += len(es)
		if len(es) > 0 {
			after = es[len(es)-1].Seq
		}
		c.tryPage(ctx, up, es, cyc)
		if len(es) < scanPage { // the end of the queue
			end = true
			break
		}
		if read >= maxScan {
			break
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if end {
		// The cycle is whole: forget the schedules of entries it did not
		// list (expired or settled).
		for seq, u := range c.nextUp {
			if u == up && c.next[seq].cycle != cyc {
				delete(c.next, seq)
				delete(c.nextUp, seq)
			}
		}
		c.cursor[up], c.cycle[up], c.listed[up] = 0, cyc+1, noted
		if start == 0 && read == 0 && c.noted[up] == noted {
			delete(c.upstreams, up) // empty until the next note
		}
	} else {
		c.cursor[up] = after
	}
	// Until when nothing of up is due: its earliest schedule, or at once
	// when entries may never have been tried.
	wait := retryMax
	if c.noted[up] != c.listed[up] {
		wait = 0
	}
	now := c.s.now()
	for seq, u := range c.nextUp {
		if u == up {
			wait = min(wait, c.next[seq].at.Sub(now))
		}
	}
	if !end {
		// The next pass goes on from the cursor: not sooner than retryFirst,
		// so a long queue is read at most maxScan entries per retryFirst.
		wait = max(wait, retryFirst)
	}
	return wait
}

// tryWorkers bounds the kept receipts a pass tries at once: each try
// waits for durable writes (the receipt queued for its account, the kept
// entry deleted), which the store commits together when they come
// together.
const tryWorkers = 64

// tryPage tries the entries of one page, up to tryWorkers at once; the
// receipts of one message id one after the other, in queue order (so an
// intermediate receipt is still queued before the final one).
func (c *reconciler) tryPage(ctx context.Context, up string, es []*state.QueueEntry, cyc uint64) {
	n := min(tryWorkers, len(es))
	if n <= 1 {
		for _, e := range es {
			c.try(ctx, up, e, cyc)
		}
		return
	}
	shards := make([][]*state.QueueEntry, n)
	for _, e := range es {
		h := fnv.New32a()
		_, _ = h.Write([]byte(e.MessageID))
		i := h.Sum32() % uint32(n)
		shards[i] = append(shards[i], e)
	}
	var wg sync.WaitGroup
	for _, shard := range shards {
		if len(shard) == 0 {
			continue
		}
		wg.Go(func() {
			for _, e := range shard {
				c.try(ctx, up, e, cyc)
			}
		})
	}
	wg.Wait()
}

// try attempts one entry of cycle cyc if it is due and schedules its next
// try unless it settled.
func (c *reconciler) try(ctx context.Context, up string, e *state.QueueEntry, cyc uint64) {
	now := c.s.now()
	c.mu.Lock()
	r, ok := c.next[e.Seq]
	if ok {
		r.cycle = cyc
		c.next[e.Seq] = r
	} else {
		r = retry{at: now, delay: retryFirst, cycle: cyc}
	}
	c.mu.Unlock()
	if now.Before(r.at) {
		return
	}
	settled, hold, err := c.attempt(ctx, up, e)
	c.mu.Lock()
	defer c.mu.Unlock()
	if settled {
		delete(c.next, e.Seq)
		delete(c.nextUp, e.Seq)
		return
	}
	if err != nil {
		c.s.warnPDU(c.s.log, slog.LevelWarn, up, "kept_match", "dlr: matching a kept receipt", "upstream", up, "receipt_id", logID(e.MessageID), "err", err)
	}
	r.delay = min(2*r.delay, retryMax)
	next := r.delay
	if now.Sub(e.Enqueued) < c.settle(up) {
		// Its submit_sm_resp may still be on its way (the record is
		// written accepted at most response_timeout after the submit):
		// looked at again soon, not after a back-off grown meanwhile.
		next = min(next, retryYoung)
	}
	if hold > 0 {
		next = min(next, max(hold, 10*time.Millisecond)) // when it may settle an unknown record
	}
	r.at = now.Add(next)
	c.next[e.Seq], c.nextUp[e.Seq] = r, up
}

// attempt matches one kept receipt; settled once it has been routed and
// removed from the unmatched queue. hold > 0: in that long the receipt
// may settle an unknown record, which it may not yet.
func (c *reconciler) attempt(ctx context.Context, up string, e *state.QueueEntry) (settled bool, hold time.Duration, err error) {
	s := c.s
	m, err := parseMessage(smpp.EncodeSimple(e.Command, smpp.StatusOK, 0, e.Body))
	if err != nil {
		return false, 0, err
	}
	r := readReceipt(m)
	rec, outcome, err := c.find(ctx, up, r, e)
	var early *tooEarlyError
	switch {
	case errors.As(err, &early):
		return false, early.hold, nil
	case errors.Is(err, errNoRecord), errors.Is(err, errIDConflict), errors.Is(err, errAmbiguous), errors.Is(err, errSettledMeanwhile):
		return false, 0, nil // tried again later
	case err != nil:
		return false, 0, err
	}
	out, err := s.route(ctx, up, rec, r)
	if err != nil {
		return false, 0, err
	}
	if out != OutDuplicate {
		out = outcome
	}
	if err := s.q.Ack(ctx, e.Queue, e.Seq); err != nil {
		return false, 0, fmt.Errorf("dlr: receipt routed but still listed as unmatched: %w", err)
	}
	s.bound.removed(up)
	s.m.received(rec.Key.Account, up, out)
	s.log.Debug("dlr: kept receipt matched", "upstream", up, "receipt_id", logID(r.id), "stat", r.stat, "outcome", out,
		"account", rec.Key.Account, "key", s.cfg.LogKey(rec.Key.Key), "segment", rec.Key.Segment, "message_id", rec.ClientMessageID())
	return true, 0, nil
}

// settle is the settle delay of upstream up: how long a receipt must have
// been kept before it may settle an unknown record by anything but its
// own id.
func (c *reconciler) settle(up string) time.Duration {
	ups := c.s.upstreams()
	u, ok := ups[up]
	if !ok {
		// Not configured (any more): the longest of those that are, so
		// as not to settle before a submit_sm_resp could have come.
		for _, o := range ups {
			u.ResponseTimeout = max(u.ResponseTimeout, o.ResponseTimeout)
		}
	}
	return u.ResponseTimeout + settleMargin
}

// Why find found no record to route a kept receipt to. Each has one
// meaning; none wraps another.
var (
	// errNoRecord: no record is the receipt's (yet).
	errNoRecord = errors.New("dlr: the receipt names no record")
	// errAmbiguous: several unknown records may be the receipt's, so it
	// settles none.
	errAmbiguous = errors.New("dlr: several unknown records may be the receipt's")
	// errSettledMeanwhile: the one candidate stopped being unknown while it
	// was being settled; the next try matches it by id.
	errSettledMeanwhile = errors.New("dlr: the record was settled otherwise meanwhile")
)

// tooEarlyError: the receipt has not been kept for the upstream's settle
// delay yet; in hold it may settle an unknown record.
type tooEarlyError struct{ hold time.Duration }

func (e *tooEarlyError) Error() string {
	return fmt.Sprintf("dlr: the receipt may settle an unknown record in %v", e.hold)
}

// keptReceipt is one kept receipt being matched to an unknown record.
type keptReceipt struct {
	up      string
	r       *receipt
	e       *state.QueueEntry
	respID  string          // the id it names its message by, as in a submit_sm_resp
	echoKey string          // the record key it echoes in echo_tlv ("" none)
	byAddr  []*state.Record // the unknown records of up with its addresses
}

// find looks for the record of a kept receipt: by id (the record was
// accepted since: OutMatchedLater), else by the echoed key TLV (byEcho)
// or as the only unknown record of the upstream with the receipt's
// addresses and time (byAddress), which resolves it to accepted with the
// receipt's id first (OutReconciled). No record is an error: errNoRecord,
// errIDConflict, errAmbiguous, errSettledMeanwhile or *tooEarlyError.
//
// The last two only once the receipt has been kept longer than the
// upstream's settle delay: a receipt can overtake its submit_sm_resp, and
// while its own record is still `sent` it would name another, unknown
// record with the same key or addresses. Once every message written
// before the receipt came has left `sent`, its own record, accepted,
// would match by id; unknown, it is a candidate too, and two candidates
// settle nothing.
func (c *reconciler) find(ctx context.Context, up string, r *receipt, e *state.QueueEntry) (*state.Record, string, error) {
	s := c.s
	rec, err := s.match(ctx, up, r)
	switch {
	case err == nil:
		return rec, OutMatchedLater, nil
	case errors.Is(err, state.ErrNotFound):
	default:
		return nil, "", err // errIDConflict or the store's
	}
	if r.id == "" || s.cfg.Resolver == nil {
		return nil, "", errNoRecord
	}
	if hold := e.Enqueued.Add(c.settle(up)).Sub(s.now()); hold > 0 {
		return nil, "", &tooEarlyError{hold}
	}
	respID, ok := s.respIDOf(up, r)
	if !ok {
		return nil, "", errIDConflict
	}
	byAddr, err := s.cfg.Store.UnknownByAddr(ctx, up, state.HashAddrs(r.m.dst, r.m.src))
	if err != nil {
		return nil, "", err
	}
	k := &keptReceipt{up: up, r: r, e: e, respID: respID, echoKey: c.echoKey(up, r), byAddr: byAddr}
	rec, err = c.byEcho(ctx, k)
	if errors.Is(err, errNoRecord) {
		rec, err = c.byAddress(ctx, k)
	}
	if err != nil {
		return nil, "", err
	}
	return rec, OutReconciled, nil
}

// echoKey returns the record key receipt r of upstream up echoes in the
// upstream's echo_tlv, or "" when it echoes none.
func (c *reconciler) echoKey(up string, r *receipt) string {
	tag := c.s.upstreams()[up].EchoTLV
	if tag == 0 || c.s.cfg.Keys.OfTLV == nil {
		return ""
	}
	v, ok := r.m.tlv(tag)
	if !ok || len(bytes.TrimRight(v, "\x00")) == 0 {
		return ""
	}
	return c.s.cfg.Keys.OfTLV(v)
}

// byEcho finds the one record with the key k echoes (resolving it when
// unknown); errNoRecord when it echoes none or no record has it (the
// addresses may tell), errAmbiguous when several do.
func (c *reconciler) byEcho(ctx context.Context, k *keptReceipt) (*state.Record, error) {
	if k.echoKey == "" {
		return nil, errNoRecord
	}
	cands, err := c.echoCandidates(ctx, k.up, k.r, k.echoKey, k.byAddr)
	if err != nil {
		return nil, err
	}
	switch len(cands) {
	case 0:
		return nil, errNoRecord
	case 1:
	default:
		c.s.log.Info("dlr: kept receipt's echoed key names several records; not resolved", "upstream", k.up, "receipt_id", logID(k.r.id), "candidates", len(cands))
		return nil, errAmbiguous
	}
	if cands[0].State != state.Unknown {
		return cands[0], nil
	}
	why := fmt.Sprintf("upstream %s echoed the key in TLV 0x%04X of receipt %s (stat %s)", k.up, c.s.upstreams()[k.up].EchoTLV, logID(k.r.id), orDash(k.r.stat))
	return c.resolve(ctx, k, cands[0].Key, why)
}

// byAddress resolves the only unknown record with k's addresses (swapped)
// created within the receipt's time window, skipping records keyed by
// another echoed key than k's; errNoRecord when there is none,
// errAmbiguous when there are several.
func (c *reconciler) byAddress(ctx context.Context, k *keptReceipt) (*state.Record, error) {
	var in []*state.Record
	for _, rec := range k.byAddr {
		if k.echoKey != "" && rec.Key.Key != k.echoKey && c.s.cfg.Keys.FromTLV(rec.Key.Key) {
			continue // its key is another one than the upstream echoed
		}
		if c.inWindow(rec, k.r, k.e) {
			in = append(in, rec)
		}
	}
	switch len(in) {
	case 0:
		return nil, errNoRecord
	case 1:
	default:
		c.s.log.Info("dlr: kept receipt matches several unknown records; not resolved", "upstream", k.up, "receipt_id", logID(k.r.id), "candidates", len(in))
		return nil, errAmbiguous
	}
	why := fmt.Sprintf("unmatched receipt %s (stat %s) from %s matched the only unknown record with its source, destination and submit time", logID(k.r.id), orDash(k.r.stat), k.up)
	return c.resolve(ctx, k, in[0].Key, why)
}

// resolve settles the unknown record key with k's id through the
// Resolver; errSettledMeanwhile when it is no longer unknown.
func (c *reconciler) resolve(ctx context.Context, k *keptReceipt, key state.Key, why string) (*state.Record, error) {
	rec, err := c.s.cfg.Resolver.ResolveFromReceipt(ctx, key, k.up, k.respID, why)
	if err != nil && c.s.cfg.NotUnknown(err) {
		return nil, errSettledMeanwhile
	}
	return rec, err
}

// echoCandidates returns the records of upstream up a receipt echoing
// record key key may be about: across the accounts routed to up, the
// unknown ones with that key (or, after all, one the receipt's own ids
// name). A whole message's record is read by its key; the parts of a
// concatenated message (Segment "n/total") are found among byAddr, the
// unknown records with the receipt's addresses, so a part is a candidate
// only when the receipt's addresses are its own.
func (c *reconciler) echoCandidates(ctx context.Context, up string, r *receipt, key string, byAddr []*state.Record) ([]*state.Record, error) {
	s := c.s
	ids := s.matchIDs(up, r)
	qualifies := func(rec *state.Record) bool {
		return rec.Upstream == up && rec.Key.Key == key &&
			(rec.State == state.Unknown || rec.MatchID() != "" && ids[rec.MatchID()])
	}
	var out []*state.Record
	accounts := s.pol.Load().accounts
	names := make([]string, 0, len(accounts))
	for name := range accounts {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !slices.Contains(accounts[name].Route, up) {
			continue
		}
		rec, err := s.cfg.Store.Get(ctx, state.Key{Account: name, Key: key})
		if errors.Is(err, state.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if qualifies(rec) {
			out = append(out, rec)
		}
	}
	for _, rec := range byAddr {
		if rec.Key.Segment != "" && qualifies(rec) {
			out = append(out, rec)
		}
	}
	return out, nil
}

// inWindow reports whether rec may be the message receipt r (kept as e)
// reports on, by time: created before the receipt arrived, and within
// ReconcileWindow of its submit date (read as UTC or local time). A
// receipt without a submit date (its ids and state in TLVs alone) gives
// no time at all, so it settles no record by its addresses: it may be the
// late receipt (EXPIRED, say) of a message days older than the unknown
// record it would take.
func (c *reconciler) inWindow(rec *state.Record, r *receipt, e *state.QueueEntry) bool {
	if rec.Created.After(e.Enqueued) {
		return false
	}
	w := c.s.cfg.ReconcileWindow
	near := func(t time.Time) bool { d := rec.Created.Sub(t); return d <= w && d >= -w }
	tu, ok := r.text.SubmitTime(time.UTC)
	if !ok {
		return false
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
		for u := range s.upstreams() {
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
