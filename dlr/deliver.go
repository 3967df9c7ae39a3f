package dlr

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppserver"
	"github.com/smppproxy/smppproxy/state"
)

// Receiver is a bound ESME session that can receive deliver_sm;
// *smppserver.Session implements it.
type Receiver interface {
	ID() string
	// Send queues a request PDU with body for the session's writer and
	// returns once it is queued, without waiting for the response:
	// requests queued by successive calls are written in call order.
	// While the session cannot take it, Send waits until ctx ends
	// (ctx.Err()) or the session ends (an error), leaving nothing behind.
	// resp delivers the response frame once; cancel forgets the request
	// and may be called more than once (smppserver.Session.Send).
	Send(ctx context.Context, id uint32, body []byte) (resp <-chan []byte, cancel func(), err error)
	// Done is closed when the session has ended: no response comes after.
	Done() <-chan struct{}
	BoundAt() time.Time
}

var _ Receiver = (*smppserver.Session)(nil)

// Receivers lists the bound receiving sessions of an account.
type Receivers interface {
	Receivers(account string) []Receiver
}

// ServerReceivers adapts an smppserver.Server (ReceiversOf) to Receivers.
func ServerReceivers(srv *smppserver.Server) Receivers { return serverReceivers{srv} }

type serverReceivers struct{ srv *smppserver.Server }

func (r serverReceivers) Receivers(account string) []Receiver {
	ss := r.srv.ReceiversOf(account)
	out := make([]Receiver, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// OnBound is smppserver.Server.OnBound: a newly bound receiving session
// gets the account's queue at once. It does not block. The server calls it
// once the bind_resp is queued, so a deliver_sm sent from here cannot
// overtake the bind_resp.
func (s *Service) OnBound(ss *smppserver.Session) {
	if ss.BindType().CanReceive() {
		s.kick(ss.Account())
	}
}

// hasReceiver reports whether account had a bound receiving session when
// its dispatcher last looked (for the routed/queued outcome label).
func (s *Service) hasReceiver(account string) bool {
	s.mu.Lock()
	d := s.accounts[account]
	s.mu.Unlock()
	return d != nil && d.bound.Load() > 0
}

// dispatcher delivers one account's queue.
type dispatcher struct {
	s       *Service
	account string
	queue   string
	// claimer is the queue when other processes deliver from it too
	// (state.Claimer): its entries are claimed before they are sent; nil
	// when this process is the queue's only deliverer.
	claimer state.Claimer
	kickc   chan struct{}
	bound   atomic.Int32 // receiving sessions seen by the last pump

	mu sync.Mutex
	// entries holds what the dispatcher knows of the queue entries it
	// has sent, by seq; an entry it has not sent, or has forgotten, is
	// pending (sent by the next pump that has a free slot).
	entries map[uint64]*entry
	// held counts the entries refused or ack_pending (held back), so that
	// a pump looks through entries for them only when there are some;
	// deleted lists those entryDeleted, to forget after the next List.
	held    map[entryState]int
	deleted []uint64
	perSess map[string]int // deliver_sm awaiting a response, per session id
	rr      int
	// The queue is read from a cursor, not from its head: a queue whose
	// acknowledged entries are deletions (tombstones until compacted)
	// would otherwise be walked from its first deletion on every pump.
	// next is the highest seq a pump has dealt with (sent, or found being
	// handled); the next List starts after it. redo is the lowest seq that
	// went back to pending at or below next (0 = none): the next List
	// starts before it. fullAt is when the next List from the head is due,
	// the safety net for an entry that became visible after one with a
	// higher seq (a store shared by several processes).
	next, redo uint64
	fullAt     time.Time

	// Acks being written (see ack).
	ackMu   sync.Mutex
	acking  bool      // a sender is writing Acks
	ackNext *ackBatch // the Acks to write next
}

// entryState is where one queue entry stands in its delivery.
type entryState int

const (
	// entrySending: a deliver_sm is out on entry.session, awaiting its
	// response.
	entrySending entryState = iota + 1
	// entryDeleting: the ESME acknowledged it (status 0); its Ack (the
	// deletion from the queue) is being written.
	entryDeleting
	// entryDeleted: acknowledged and deleted; forgotten after the next List
	// (which cannot return it).
	entryDeleted
	// entryRefused: the ESME refused it; not sent again before entry.at.
	entryRefused
	// entryAckPending: acknowledged by the ESME, but the store refused the
	// Ack. Never sent again (unless the proxy restarts first): pump writes
	// the Ack again at entry.at, with back-off entry.delay.
	entryAckPending
)

var entryStateNames = [...]string{entrySending: "sending", entryDeleting: "deleting", entryDeleted: "deleted", entryRefused: "refused", entryAckPending: "ack_pending"}

func (s entryState) String() string {
	if s > 0 && int(s) < len(entryStateNames) {
		return entryStateNames[s]
	}
	return "pending"
}

// entry is the dispatcher's view of one queue entry it has sent.
type entry struct {
	state   entryState
	session string        // entrySending: the session it was sent on
	at      time.Time     // entryRefused: not before; entryAckPending: the next Ack
	delay   time.Duration // entryAckPending: the current back-off
}

// Back-off of an Ack the store refused.
const (
	ackRetryFirst = 100 * time.Millisecond
	ackRetryMax   = 10 * time.Second
)

func newDispatcher(s *Service, account string) *dispatcher {
	c, _ := s.q.(state.Claimer)
	return &dispatcher{
		s: s, account: account, queue: accountQueue(account), claimer: c,
		kickc:   make(chan struct{}, 1),
		entries: map[uint64]*entry{}, held: map[entryState]int{}, perSess: map[string]int{},
	}
}

// setLocked puts entry seq in e's state (nil: forgets it, pending).
func (d *dispatcher) setLocked(seq uint64, e *entry) {
	if old, ok := d.entries[seq]; ok && (old.state == entryRefused || old.state == entryAckPending) {
		d.held[old.state]--
	}
	if e == nil {
		delete(d.entries, seq)
		return
	}
	d.entries[seq] = e
	switch e.state {
	case entryRefused, entryAckPending:
		d.held[e.state]++
	case entryDeleted:
		d.deleted = append(d.deleted, seq)
	}
}

func (d *dispatcher) wake() {
	select {
	case d.kickc <- struct{}{}:
	default:
	}
}

// idleTick bounds how long a dispatcher sleeps without a kick: a safety
// net (expiry of back-offs, sessions bound without OnBound).
const idleTick = time.Second

// pumpGap is the least time between the starts of two pumps woken by a
// kick while the last one sent all it found (no backlog): the receipts
// queued meanwhile are then served by one List (a List per receipt cost
// more than the receipt's delivery). A kick after a quiet spell, or while
// a backlog waits for window slots, is served at once. It paces the loop
// in real time and decides nothing about entries.
const pumpGap = time.Millisecond

func (d *dispatcher) run() {
	t := time.NewTimer(0)
	defer t.Stop()
	var last time.Time // when the last pump started (real time)
	backlog := false   // the last pump left entries for lack of window slots
	for {
		select {
		case <-d.s.ctx.Done():
			return
		case <-d.kickc:
			if wait := pumpGap - time.Since(last); wait > 0 && !backlog {
				select {
				case <-d.s.ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		case <-t.C:
		}
		last = time.Now()
		var next time.Duration
		next, backlog = d.pump()
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

// pump sends what can be sent now and returns how long to sleep at most,
// and whether entries may be left for lack of window slots (backlog).
func (d *dispatcher) pump() (time.Duration, bool) {
	now := d.s.now()
	ready, sleep := d.readySessions(now)
	sleep = min(sleep, d.retryAcks())
	if len(ready) == 0 {
		return sleep, false
	}
	win := d.window()
	d.mu.Lock()
	free := 0
	for _, r := range ready {
		free += max(0, win-d.perSess[r.ID()])
	}
	c := d.cursorLocked(now, free)
	// Entries deleted before this List are not in it: they can be
	// forgotten afterwards. Those deleted while it runs may be in it and
	// are skipped by their state.
	if free == 0 {
		d.mu.Unlock()
		return sleep, true
	}
	prune := d.deleted
	d.deleted = nil
	d.mu.Unlock()
	entries, err := d.list(c.after, c.limit)
	if err != nil {
		d.mu.Lock()
		d.deleted = append(d.deleted, prune...) // forgotten after a List
		d.mu.Unlock()
		if d.s.ctx.Err() == nil {
			d.s.log.Warn("dlr: reading the queue", "account", d.account, "err", err)
		}
		return sleep, false
	}
	d.mu.Lock()
	for _, seq := range prune {
		if e, ok := d.entries[seq]; ok && e.state == entryDeleted {
			d.setLocked(seq, nil)
		}
	}
	d.forgetExpiredLocked(entries, c.after, c.limit)
	if d.redo == c.redo {
		d.redo = 0 // covered by this List (one noted meanwhile is kept)
	}
	if c.full {
		d.fullAt = now.Add(fullListEvery)
	}
	sends, stop, wait := d.assignLocked(entries, ready, win, now)
	// What this pump did not get to below the cursor is listed again by
	// the next one.
	switch {
	case stop < len(entries) && entries[stop].Seq <= d.next:
		d.redoLocked(entries[stop].Seq)
	case stop == len(entries) && stop > 0 && stop == c.limit && entries[stop-1].Seq < d.next:
		d.redoLocked(entries[stop-1].Seq + 1)
	}
	d.mu.Unlock()
	d.start(sends)
	return min(sleep, wait), stop < len(entries) || len(entries) == c.limit
}

// list lists the queue for a pump: on a queue shared with other processes
// (state.Claimer), without the entries another process has claimed, which
// this one could not claim (it lists them again once their claim ran out,
// on its next List from the head).
func (d *dispatcher) list(after uint64, limit int) ([]*state.QueueEntry, error) {
	if d.claimer != nil {
		return d.claimer.ListClaimable(d.s.ctx, d.queue, after, limit, d.s.cfg.Instance)
	}
	return d.s.q.List(d.s.ctx, d.queue, after, limit)
}

// window is the account's window of deliver_sm awaiting their response
// per session (Account.Window, else Config.DeliverWindow).
func (d *dispatcher) window() int {
	if w := d.s.account(d.account).Window; w > 0 {
		return w
	}
	return d.s.cfg.DeliverWindow
}

// fullListEvery: how often a dispatcher reads its queue from the head
// rather than from its cursor (see dispatcher.next).
const fullListEvery = time.Second

// listing is where a pump reads the queue from and how much of it.
type listing struct {
	after uint64
	limit int
	full  bool   // from the head
	redo  uint64 // dispatcher.redo when it was chosen
}

// cursorLocked chooses the List of a pump with free window slots: from
// the head when one is due, before the lowest entry that went back to
// pending or whose refusal has run out, else after the last entry dealt
// with (then only the free slots' worth is read).
func (d *dispatcher) cursorLocked(now time.Time, free int) listing {
	if d.held[entryRefused] > 0 {
		for seq, e := range d.entries {
			if e.state == entryRefused && !now.Before(e.at) {
				d.redoLocked(seq)
			}
		}
	}
	c := listing{after: d.next, limit: free, redo: d.redo}
	switch {
	case !now.Before(d.fullAt):
		c.after, c.full = 0, true
	case d.redo != 0:
		c.after = min(d.next, d.redo-1)
	}
	if c.after != d.next {
		c.limit += len(d.entries) // the entries in hand are listed again
	}
	return c
}

// redoLocked notes that entry seq is to be sent again (pending, or its
// refusal ran out) though the cursor may have passed it.
func (d *dispatcher) redoLocked(seq uint64) {
	if d.redo == 0 || seq < d.redo {
		d.redo = seq
	}
}

// readySessions returns the account's receiving sessions bound for at
// least BindSettle, ordered by id, and how long until the next one is.
func (d *dispatcher) readySessions(now time.Time) ([]Receiver, time.Duration) {
	sleep := idleTick
	var ready []Receiver
	for _, r := range d.s.receivers(d.account) {
		if at := r.BoundAt().Add(d.s.cfg.BindSettle); now.Before(at) {
			sleep = min(sleep, at.Sub(now))
			continue
		}
		ready = append(ready, r)
	}
	d.bound.Store(int32(len(ready)))
	sort.Slice(ready, func(i, j int) bool { return ready[i].ID() < ready[j].ID() })
	return ready, sleep
}

// seqsLocked returns the seqs of the entries in state st, in order.
func (d *dispatcher) seqsLocked(st entryState) []uint64 {
	var out []uint64
	for seq, e := range d.entries {
		if e.state == st {
			out = append(out, seq)
		}
	}
	slices.Sort(out)
	return out
}

// forgetExpiredLocked forgets the entries held back (refused, or
// acknowledged with the Ack still to write) that a List of limit entries
// after seq after should have returned and did not: they are gone
// (expired). List covers every seq from after to the last one it
// returned, and all of them past after when it returned fewer than limit.
//
// On a queue shared with other processes (state.Claimer) the list leaves
// out the entries another process's claim holds, so an entry missing from
// it may be live: one refused here is then that process's to deliver
// (forgetting it is right), but one acknowledged here is kept until its
// Ack is written (an Ack of an entry gone deletes nothing), else it could
// be sent again once that other claim runs out.
func (d *dispatcher) forgetExpiredLocked(listed []*state.QueueEntry, after uint64, limit int) {
	if d.held[entryRefused]+d.held[entryAckPending] == 0 {
		return
	}
	in := make(map[uint64]bool, len(listed))
	for _, e := range listed {
		in[e.Seq] = true
	}
	shared := d.claimer != nil
	for seq, e := range d.entries {
		if e.state != entryRefused && e.state != entryAckPending || in[seq] || seq <= after {
			continue
		}
		if shared && e.state == entryAckPending {
			continue
		}
		if len(listed) < limit || seq < listed[len(listed)-1].Seq {
			d.setLocked(seq, nil)
		}
	}
}

// assignLocked gives the listed entries that may be sent now to the
// ready sessions, round-robin within each session's window, and returns
// them, the index of the first listed entry it did not get to (the
// windows were full), and how long until a refused one may be sent again.
func (d *dispatcher) assignLocked(listed []*state.QueueEntry, ready []Receiver, win int, now time.Time) ([]assignment, int, time.Duration) {
	sleep := idleTick
	var sends []assignment
	for i, qe := range listed {
		if e, ok := d.entries[qe.Seq]; ok && (e.state != entryRefused || now.Before(e.at)) {
			if e.state == entryRefused {
				sleep = min(sleep, e.at.Sub(now))
			}
			// Being sent, acknowledged, deleted, or refused for now (listed
			// again once due: cursorLocked): the cursor passes it.
			d.next = max(d.next, qe.Seq)
			continue
		}
		r := d.pickLocked(ready, win)
		if r == nil {
			return sends, i, sleep
		}
		d.setLocked(qe.Seq, &entry{state: entrySending, session: r.ID()})
		d.perSess[r.ID()]++
		d.next = max(d.next, qe.Seq)
		sends = append(sends, assignment{r, qe})
	}
	return sends, len(listed), sleep
}

// start sends the assigned entries one at a time, in queue order, each
// one queued by its session (Send returned) before the next is started: a
// session writes its deliver_sm in queue order while several await their
// response.
func (d *dispatcher) start(sends []assignment) {
	sends = d.claim(sends)
	claimed := d.s.now()
	for i := 0; i < len(sends); i++ {
		if d.claimer != nil && i > 0 && d.s.now().Sub(claimed) >= d.s.account(d.account).Redelivery/2 {
			// The sends so far took a while (sessions waiting for room):
			// the claim is extended for the rest, so that it outlasts
			// each send started under it (see claim).
			sends = append(sends[:i], d.claim(sends[i:])...)
			claimed = d.s.now()
			if i == len(sends) {
				return
			}
		}
		a := sends[i]
		queued := make(chan struct{})
		d.s.wg.Add(1)
		go func() {
			defer d.s.wg.Done()
			d.send(a.r, a.e, queued)
		}()
		select {
		case <-queued:
		case <-time.After(enqueueWait):
		case <-d.s.ctx.Done():
		}
	}
}

// claim claims the entries of sends for this process when the queue is
// shared with other processes (state.Claimer), all at once, for twice
// dlr_redelivery and enqueueWait: a send ends at most dlr_redelivery
// after it started, and start claims again what it has not started once
// half of dlr_redelivery has passed (checked between sends, which start
// at most enqueueWait apart), so each send starts with at least one and a
// half dlr_redelivery of claim left, for its answer and the Ack after it.
// (An acknowledged entry whose Ack the store refused may outlast its
// claim: another process may then deliver it again, at least once as
// ever.)
// It returns the sends claimed. An entry another process holds is given
// back (left pending: listed again by a later pump, delivered by the other
// process or once its claim ran out).
func (d *dispatcher) claim(sends []assignment) []assignment {
	c := d.claimer
	if c == nil || len(sends) == 0 {
		return sends
	}
	until := d.s.now().Add(2*d.s.account(d.account).Redelivery + enqueueWait)
	seqs := make([]uint64, len(sends))
	for i, a := range sends {
		seqs[i] = a.e.Seq
	}
	got, err := c.Claim(d.s.ctx, d.queue, seqs, d.s.cfg.Instance, until)
	if err != nil && d.s.ctx.Err() == nil {
		d.s.warnPDU(d.s.log, slog.LevelWarn, d.account, "claim", "dlr: claiming queued entries", "account", d.account, "entries", len(seqs), "err", err)
	}
	claimed := make(map[uint64]bool, len(got))
	for _, seq := range got {
		claimed[seq] = true
	}
	var out []assignment
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range sends {
		if claimed[a.e.Seq] {
			out = append(out, a)
			continue
		}
		d.setLocked(a.e.Seq, nil)
		d.redoLocked(a.e.Seq)
		if d.perSess[a.r.ID()]--; d.perSess[a.r.ID()] <= 0 {
			delete(d.perSess, a.r.ID())
		}
	}
	return out
}

// retryAcks writes again, with back-off, the due Acks of entries the ESME
// acknowledged and the store refused to delete, and returns how long until
// the next one is due. After one failure the other due ones wait too (the
// store is very likely refusing them all).
func (d *dispatcher) retryAcks() time.Duration {
	now := d.s.now()
	d.mu.Lock()
	if d.held[entryAckPending] == 0 {
		d.mu.Unlock()
		return idleTick
	}
	var due []uint64
	for _, seq := range d.seqsLocked(entryAckPending) {
		if !now.Before(d.entries[seq].at) {
			due = append(due, seq)
		}
	}
	d.mu.Unlock()
	var failed error
	for _, seq := range due {
		if failed == nil {
			if failed = d.s.q.Ack(d.s.ctx, d.queue, seq); failed == nil {
				d.mu.Lock()
				if e, ok := d.entries[seq]; ok && e.state == entryAckPending {
					d.setLocked(seq, &entry{state: entryDeleted})
				}
				d.mu.Unlock()
				d.s.m.depth.WithLabelValues(d.account).Dec()
				d.s.log.Info("dlr: acknowledged delivery recorded on a later try", "account", d.account, "seq", seq)
				continue
			}
			if d.s.ctx.Err() == nil {
				d.s.log.Warn("dlr: store still refuses the Ack of acknowledged deliveries; retried with back-off", "account", d.account, "waiting", len(due), "err", failed)
			}
		}
		d.mu.Lock()
		if e, ok := d.entries[seq]; ok && e.state == entryAckPending {
			e.delay = min(2*e.delay, ackRetryMax)
			e.at = now.Add(e.delay)
		}
		d.mu.Unlock()
	}
	next := idleTick
	d.mu.Lock()
	for _, e := range d.entries {
		if e.state == entryAckPending {
			next = min(next, max(e.at.Sub(now), time.Millisecond))
		}
	}
	d.mu.Unlock()
	return next
}

// batchAcker is implemented by a queue that acknowledges several entries
// in one write (state.BadgerStore, state.MemStore).
type batchAcker interface {
	AckAll(ctx context.Context, queue string, seqs []uint64) error
}

// ackBatch is the Acks gathered while the one before was being written.
type ackBatch struct {
	seqs []uint64
	done chan struct{} // closed once err is set
	err  error
}

// ack deletes entry seq from the queue (Queue.Ack). With a batchAcker,
// the Acks of the entries acknowledged while one is written are written
// together next (one write request for all: the store would commit them
// in one group anyway, but each request costs), by the sender that wrote
// the one before: it writes batches until none is waiting. It returns
// once seq's Ack is durable or has failed.
func (d *dispatcher) ack(seq uint64) error {
	ctx := context.WithoutCancel(d.s.ctx)
	ba, ok := d.s.q.(batchAcker)
	if !ok {
		return d.s.q.Ack(ctx, d.queue, seq)
	}
	d.ackMu.Lock()
	if d.ackNext == nil {
		d.ackNext = &ackBatch{done: make(chan struct{})}
	}
	mine := d.ackNext
	mine.seqs = append(mine.seqs, seq)
	if d.acking {
		d.ackMu.Unlock()
		<-mine.done
		return mine.err
	}
	d.acking = true
	for d.ackNext != nil {
		b := d.ackNext
		d.ackNext = nil
		d.ackMu.Unlock()
		b.err = ba.AckAll(ctx, d.queue, b.seqs)
		close(b.done)
		d.ackMu.Lock()
	}
	d.acking = false
	d.ackMu.Unlock()
	return mine.err
}

// assignment is one entry given to one session by pump.
type assignment struct {
	r Receiver
	e *state.QueueEntry
}

// enqueueWait bounds how long pump waits for a session to take a
// deliver_sm into its write queue before it starts the next one (only the
// order within the window suffers when it passes, never delivery).
const enqueueWait = time.Second

// request sends a request PDU on r and waits for its response frame as
// smppserver.Session.Request does (smppserver.AwaitResponse); queued is
// closed as soon as Send has returned, the request queued or refused.
func request(ctx context.Context, r Receiver, id uint32, body []byte, queued chan<- struct{}) ([]byte, error) {
	respc, forget, err := r.Send(ctx, id, body)
	close(queued)
	if err != nil {
		return nil, err
	}
	defer forget()
	return smppserver.AwaitResponse(ctx, respc, r.Done())
}

// pickLocked returns the next session round-robin with a free window slot.
func (d *dispatcher) pickLocked(ready []Receiver, win int) Receiver {
	for range ready {
		d.rr++
		r := ready[d.rr%len(ready)]
		if d.perSess[r.ID()] < win {
			return r
		}
	}
	return nil
}

// send delivers one entry and settles it. On status 0 the session's
// window slot is given back at once and the entry deleted from the queue
// (it is entryDeleting until then, and entryDeleted after, so it is never
// sent again for one acknowledgement); otherwise it is left for
// redelivery.
// queued is closed once the deliver_sm is queued by the session or failed.
func (d *dispatcher) send(r Receiver, e *state.QueueEntry, queued chan<- struct{}) {
	// The entry's logger is made only for a line to log (it is not free).
	log := func() *slog.Logger {
		return d.s.log.With("account", d.account, "session", r.ID(), "kind", e.Kind, "message_id", e.MessageID, "upstream", e.Upstream)
	}
	ctx, cancel := context.WithTimeout(d.s.ctx, d.s.account(d.account).Redelivery)
	resp, err := request(ctx, r, e.Command, e.Body, queued)
	cancel()
	outcome := DelAcked
	var st smpp.Status
	switch {
	case err == nil:
		h := smpp.ParseHeader(resp)
		st = h.Status
		if h.ID != e.Command|smpp.RespBit && st == smpp.StatusOK {
			// Not the request's response (a generic_nack: the ESME could
			// not take the PDU), whatever its status says.
			st = smpp.StatusSysErr
		}
		if st != smpp.StatusOK {
			outcome = DelRefused
		}
	case errors.Is(err, context.DeadlineExceeded):
		outcome = DelTimeout
	default:
		outcome = DelLost
	}
	d.mu.Lock()
	if d.perSess[r.ID()]--; d.perSess[r.ID()] <= 0 {
		delete(d.perSess, r.ID())
	}
	switch outcome {
	case DelAcked:
		d.setLocked(e.Seq, &entry{state: entryDeleting})
	case DelRefused:
		d.setLocked(e.Seq, &entry{state: entryRefused, at: d.s.now().Add(d.s.account(d.account).Redelivery)})
	default:
		d.setLocked(e.Seq, nil) // pending: sent again by the next pump
		d.redoLocked(e.Seq)
	}
	d.mu.Unlock()
	if outcome == DelAcked {
		d.wake() // the window slot is free while the Ack is written
		aerr := d.ack(e.Seq)
		d.mu.Lock()
		if aerr == nil {
			d.setLocked(e.Seq, &entry{state: entryDeleted})
		} else {
			d.setLocked(e.Seq, &entry{state: entryAckPending, at: d.s.now().Add(ackRetryFirst), delay: ackRetryFirst})
		}
		d.mu.Unlock()
		if aerr != nil {
			outcome = DelAckFailed
			d.s.warnPDU(log(), slog.LevelError, d.account, "ack_failed", "dlr: acknowledged delivery not recorded; not sent again, the Ack is retried with back-off (a restart before it succeeds delivers it again)", "err", aerr)
		} else {
			d.s.m.depth.WithLabelValues(d.account).Dec()
		}
	}
	if d.s.ctx.Err() != nil && outcome != DelAcked {
		return // shutting down: the entry stays queued
	}
	d.s.m.delivered(d.account, outcome)
	switch outcome {
	case DelAcked:
		if d.s.log.Enabled(d.s.ctx, slog.LevelDebug) {
			log().Debug("dlr: delivered")
		}
	case DelRefused:
		d.s.warnPDU(log(), slog.LevelWarn, d.account, "refused", "dlr: ESME refused a deliver_sm; redelivery after dlr_redelivery", "status", st.String(), "redelivery", d.s.account(d.account).Redelivery)
	default:
		log().Debug("dlr: deliver_sm not acknowledged; will be delivered again", "outcome", outcome, "err", err)
	}
	d.wake()
}
