package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/smppproxy/smppproxy/internal/varcodec"
	"github.com/smppproxy/smppproxy/state"
)

// request is one write waiting for the committer. queue adds its
// statements to the batch with callbacks that fill the caller's results;
// those results count only once the batch committed (err nil).
type request struct {
	order   lockOrder
	seqLock bool // takes the queue sequence lock (Enqueue)
	// One of: a Create, a Replace, a conditional write or an Enqueue
	// (each written with the batch's others of the kind), or a function
	// adding the request's own statements.
	create  *createOp
	replace *replaceOp
	cas     *casOp
	enqueue *enqueueOp
	queue   func(b *pgx.Batch)

	claim atomic.Int32 // claimWaiting, claimTaken, claimAbandoned
	err   error
	done  chan struct{}
}

const (
	claimWaiting = iota
	claimTaken
	claimAbandoned
)

// lockOrder is the order in which a batch takes its row locks: every
// batch takes them in the same order, so two batches (of this process or
// another) never wait for each other in a cycle.
type lockOrder struct {
	table   int // orderRecord, orderMarker, orderEntry
	a, b, c []byte
}

const (
	orderRecord = iota
	orderMarker
	orderEntry
)

func compareOrder(x, y *request) int {
	if c := x.order.table - y.order.table; c != 0 {
		return c
	}
	if c := bytes.Compare(x.order.a, y.order.a); c != 0 {
		return c
	}
	if c := bytes.Compare(x.order.b, y.order.b); c != 0 {
		return c
	}
	return bytes.Compare(x.order.c, y.order.c)
}

// seqLockKey is the advisory lock that serialises enqueuing transactions
// (pg_advisory_xact_lock), so queue sequence numbers commit in order.
const seqLockKey = 0x736d7070_71736571 // "smppqseq"

// submit hands r to the committer (waiting for room while ctx allows) and
// waits for its outcome. When ctx ends before the committer took r, r is
// dropped and nothing is written; once taken, the outcome is waited for
// (bounded by Options.Timeout).
func (s *Store) submit(ctx context.Context, r *request) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := s.health.gate(); err != nil {
		s.exit()
		return err
	}
	r.done = make(chan struct{})
	select {
	case s.reqs <- r:
		s.exit()
	case <-ctx.Done():
		s.exit()
		return fmt.Errorf("pgstore: %w", ctx.Err())
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		if r.claim.CompareAndSwap(claimWaiting, claimAbandoned) {
			return fmt.Errorf("pgstore: %w", ctx.Err())
		}
		<-r.done
		return r.err
	}
}

func (s *Store) commitLoop() {
	defer s.commitDone.Done()
	for batch := range s.batches {
		s.runBatch(batch)
		s.gate.finished()
	}
}

// runBatch commits the requests their callers still wait for: the
// enqueues in one transaction, which takes the queue sequence lock (every
// instance's enqueues wait for each other's), the other writes in another,
// side by side, so that they never wait for that lock (see splitBatch and
// commitPart).
func (s *Store) runBatch(batch []*request) {
	live := batch[:0]
	for _, r := range batch {
		if r.claim.CompareAndSwap(claimWaiting, claimTaken) {
			live = append(live, r)
		}
	}
	locked, free := splitBatch(live)
	if len(locked) > 0 && len(free) > 0 {
		var wg sync.WaitGroup
		wg.Go(func() { s.commitPart(locked) })
		s.commitPart(free)
		wg.Wait()
		return
	}
	s.commitPart(append(locked, free...))
}

// splitBatch parts a batch into the requests that take the queue sequence
// lock (enqueues) and the others, but a write of a record that an enqueue
// of the batch marks (EnqueueAppend) goes with the enqueues: two
// transactions of one batch writing the same records, each in its own
// order, could wait for each other in a cycle (PostgreSQL would break it
// only after deadlock_timeout, the queue lock held all along).
func splitBatch(reqs []*request) (locked, free []*request) {
	var marked map[string]bool
	for _, r := range reqs {
		if !r.seqLock {
			continue
		}
		locked = append(locked, r)
		if r.enqueue != nil && r.enqueue.app != nil {
			if marked == nil {
				marked = map[string]bool{}
			}
			a := r.enqueue.app.args
			marked[recordName(a[0].([]byte), a[1].([]byte), a[2].([]byte))] = true
		}
	}
	for _, r := range reqs {
		switch {
		case r.seqLock:
		case r.order.table == orderRecord && marked[recordName(r.order.a, r.order.b, r.order.c)]:
			locked = append(locked, r)
		default:
			free = append(free, r)
		}
	}
	return locked, free
}

// recordName names a record by its account, key and segment (one string
// per record: a map key).
func recordName(account, key, segment []byte) string {
	return string(varcodec.AppendString(varcodec.AppendString(varcodec.AppendString(nil, string(account)), string(key)), string(segment)))
}

// commitPart commits reqs as one transaction. A part PostgreSQL refused
// (nothing of it written) is retried request by request, so one bad
// request fails alone; a part whose outcome is unknown or that committed
// is never run again.
func (s *Store) commitPart(live []*request) {
	if len(live) == 0 {
		return
	}
	slices.SortStableFunc(live, compareOrder)
	err := s.execRetry(live)
	if len(live) > 1 && rejected(err) {
		// PostgreSQL refused a statement: the part's implicit transaction
		// rolled back and nothing of it was written. Each request is tried
		// alone, so that one bad request fails only itself.
		for _, r := range live {
			r.err = s.execRetry([]*request{r})
			close(r.done)
		}
		return
	}
	for _, r := range live {
		r.err = err
		close(r.done)
	}
}

// rejected reports whether err is PostgreSQL's refusal of a statement of
// a batch, or an error before anything was sent, after which nothing of
// the batch was written. Any other error
// leaves the batch's outcome unknown (the connection broke: it may have
// committed) or says the batch committed and reading its answers failed
// here: a batch is never run again after those.
func rejected(err error) bool {
	var pe *pgconn.PgError
	return (errors.As(err, &pe) || pgconn.SafeToRetry(err)) && !isConnError(err)
}

// execRetry runs exec again when PostgreSQL broke a deadlock or a
// serialization conflict by aborting it (nothing was written).
func (s *Store) execRetry(reqs []*request) error {
	var err error
	for range 4 {
		if err = s.exec(reqs); !isRetryable(err) {
			return err
		}
	}
	return err
}

// exec sends the requests' statements as one pipelined batch: one
// implicit transaction, committed (and flushed) when the batch's results
// are all read.
func (s *Store) exec(reqs []*request) error {
	if err := s.health.gate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	b := &pgx.Batch{}
	if slices.ContainsFunc(reqs, func(r *request) bool { return r.seqLock }) {
		b.Queue("SELECT pg_advisory_xact_lock($1)", int64(seqLockKey))
	}
	var (
		creates  []*createOp
		replaces []*replaceOp
		cas      []*casOp
		enqueues []*enqueueOp
	)
	marks := false // an enqueue writes its record by key too
	for _, r := range reqs {
		switch {
		case r.create != nil:
			creates = append(creates, r.create)
		case r.replace != nil:
			replaces = append(replaces, r.replace)
		case r.cas != nil:
			cas = append(cas, r.cas)
		case r.enqueue != nil:
			enqueues = append(enqueues, r.enqueue)
			marks = marks || r.enqueue.app != nil
		}
	}
	// Every statement that joins a batch's keys with records probes the
	// primary key (creates too: planned for the arguments of their first
	// executions on a connection, a large batch of them read the table).
	if len(creates)+len(replaces)+len(cas) > 0 || marks {
		b.Queue(sqlIndexProbes)
	}
	w := writer{instance: s.opts.InstanceID, token: s.token}
	queueCreates(b, creates, w)
	queueReplaces(b, replaces, w)
	queueCAS(b, cas, w)
	queueEnqueues(b, enqueues, s.notifyChannel())
	for _, r := range reqs {
		if r.queue != nil {
			r.queue(b)
		}
	}
	start := time.Now()
	err := sendBatch(ctx, s.pool, b)
	s.execNanos.Add(uint64(time.Since(start)))
	s.health.reportWrite(err)
	if err != nil {
		return wrapErr(err)
	}
	if writesRefused(creates, replaces) {
		s.explainRefusals(ctx, w, creates, replaces)
	}
	for _, op := range creates {
		op.settle()
	}
	for _, op := range enqueues {
		op.settle()
	}
	s.commits.Add(1)
	s.ops.Add(uint64(len(reqs)))
	return nil
}

// writesRefused reports whether a create of the batch got no answer (its
// key neither inserted nor found live) or a replace was not applied.
func writesRefused(creates []*createOp, replaces []*replaceOp) bool {
	if slices.ContainsFunc(creates, (*createOp).unanswered) {
		return true
	}
	for _, op := range replaces {
		if !op.applied {
			return true
		}
	}
	return false
}

// explainRefusals reads, after a batch some of whose writes were refused
// (rarely), whether its writer still holds its instance and its lease,
// and says why each was refused: a replace not applied (refusal, else
// ErrChanged), a create without answer when the lease is gone
// (state.ErrLeaseLost; else it lost its key to a writer that committed
// meanwhile, and Create reads it). The statements' own conditions decided
// the writes; this only says why, a moment later: unreadable, the lease
// counts as gone and the instance as held.
func (s *Store) explainRefusals(ctx context.Context, w writer, creates []*createOp, replaces []*replaceOp) {
	var lease, held bool
	if err := s.pool.QueryRow(ctx, sqlWriter, w.instance, w.token).Scan(&lease, &held); err != nil {
		lease, held = false, true
	}
	for _, op := range replaces {
		if op.applied {
			continue
		}
		if op.err = s.refusal(op.key, op.next, lease, held); op.err == nil {
			op.err = fmt.Errorf("%w: %v: %w", ErrChanged, op.key, state.ErrTakenOver)
		}
	}
	if lease {
		return
	}
	for _, op := range creates {
		if op.unanswered() {
			op.err = fmt.Errorf("pgstore: create of %v: %w", op.rec.Key, state.ErrLeaseLost)
		}
	}
}

// sendBatch runs b on a connection of pool, whose write buffer is first
// grown to hold it (reserveWrite), and reads its results.
func sendBatch(ctx context.Context, pool *pgxpool.Pool, b *pgx.Batch) error {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	size := 0
	for _, q := range b.QueuedQueries {
		// The messages around the arguments (Bind with the statement's
		// name, Execute), and the arguments.
		size += 256 + argsSize(q.Arguments)
	}
	c.Conn().PgConn().Frontend().Send(reserveWrite(size + size/16))
	return c.SendBatch(ctx, b).Close()
}

// wrapErr marks connection failures with ErrUnavailable.
func wrapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, state.ErrNotFound), errors.Is(err, state.ErrClosed), errors.Is(err, ErrUnavailable),
		errors.Is(err, state.ErrLeaseLost), errors.Is(err, state.ErrTakenOver):
		return err
	case isConnError(err):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return fmt.Errorf("pgstore: %w", err)
}

// isConnError reports whether err says the database could not be reached
// or the connection broke (as opposed to an error of the statement).
func isConnError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var (
		pe *pgconn.PgError
		ce *pgconn.ConnectError
		ne net.Error
	)
	switch {
	case errors.As(err, &ce):
		// Whatever the server said while connecting (too many clients,
		// no such database, authentication), no statement ran.
		return true
	case errors.As(err, &pe):
		switch pe.Code {
		case "57P01", "57P02", "57P03", // admin or crash shutdown, cannot connect now
			"57P04", "57P05", // database dropped, idle session timeout
			"25006": // read-only: a standby, or a primary being failed over
			return true
		}
		return strings.HasPrefix(pe.Code, "08")
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, pgconn.ErrConnClosed), pgconn.Timeout(err):
		return true
	}
	return false
}

// isRetryable reports a transaction aborted to break a deadlock or a
// serialization conflict.
func isRetryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// health is the reconnect back-off: after a connection failure,
// operations fail at once with ErrUnavailable until the back-off delay
// has passed; then the next operation tries the database again (the pool
// reconnects) and a success clears the state. The delay doubles with each
// failure, from 50 ms to 5 s.
//
// A statement refused because the server is read-only (a failover in
// progress, or the pool's connections still on a demoted primary) counts
// as a connection failure, and the pool's connections are closed
// (onReadOnly) so that the next ones are made again, to where the DSN
// now leads (with target_session_attrs=read-write, the writable host).
type health struct {
	mu         sync.Mutex
	failures   int
	until      time.Time
	last       error
	onReadOnly func()
	lastReset  time.Time // of onReadOnly: at most one a second
	// writeErr is the last write's failure to reach the database or to
	// be taken (read-only), until a write succeeds: reads, which a
	// read-only server serves, do not clear it (writable).
	writeErr error
}

// isReadOnly reports a statement refused by a read-only server.
func isReadOnly(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "25006"
}

// writable is the last write's failure while no write has succeeded
// since (nil otherwise): what readiness reports.
func (h *health) writable() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.writeErr == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, h.writeErr)
}

// reportWrite is report for an operation that writes (a batch, a lease
// renewal, a locked update): it also sets or clears what writable says.
func (h *health) reportWrite(err error) {
	h.report(err)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		h.writeErr = nil
	case isConnError(err) && !errors.Is(err, ErrUnavailable):
		h.writeErr = err
	}
}

const (
	backoffMin = 50 * time.Millisecond
	backoffMax = 5 * time.Second
)

func (h *health) gate() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failures == 0 || !time.Now().Before(h.until) {
		return nil
	}
	return fmt.Errorf("%w (retrying in %v): %w", ErrUnavailable, time.Until(h.until).Round(time.Millisecond), h.last)
}

func (h *health) report(err error) {
	if err != nil && !isConnError(err) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.failures, h.last = 0, nil
		return
	}
	if errors.Is(err, ErrUnavailable) {
		return // a refusal of gate itself
	}
	h.failures++
	d := backoffMin << min(h.failures-1, 7)
	h.until, h.last = time.Now().Add(min(d, backoffMax)), err
	if isReadOnly(err) && h.onReadOnly != nil && time.Since(h.lastReset) >= time.Second {
		h.lastReset = time.Now()
		go h.onReadOnly()
	}
}
