package pgstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/smppproxy/smppproxy/state"
)

// Lease reports whether this instance holds its lease now, with a margin
// of a quarter of it left: its last renewal succeeded and runs out no
// sooner than that. While it does not, the proxy neither admits nor
// writes upstream a submit: the other instances take its sent records
// over once the lease has run out, and the margin covers a submit whose
// check passed until it is written upstream. The heartbeat renews every
// third of the lease, and does not wait for one that takes longer than a
// sixth before starting another, so one renewal that hangs while the
// database is fine again leaves no gap.
func (s *Store) Lease() bool {
	until := s.leaseUntil.Load()
	return until != nil && s.now().Before(until.Add(-s.opts.Lease/leaseMarginDiv))
}

// leaseMarginDiv: Lease reports the lease held while more than
// Lease/leaseMarginDiv of it is left.
const leaseMarginDiv = 4

// setLeaseUntil records t as when the lease held runs out, unless a
// renewal sent later (in flight beside this one) already recorded more,
// or another process took the instance over (a renewal sent before that
// and answered after it does not give the lease back).
func (s *Store) setLeaseUntil(t time.Time) {
	for !s.takenOver.Load() {
		cur := s.leaseUntil.Load()
		if cur != nil && !t.After(*cur) {
			return
		}
		if s.leaseUntil.CompareAndSwap(cur, &t) {
			if s.takenOver.Load() {
				s.leaseUntil.Store(nil) // taken over while this was recorded
			}
			return
		}
	}
}

// LeaseUntil is when the lease last renewed runs out (zero: none).
func (s *Store) LeaseUntil() time.Time {
	if until := s.leaseUntil.Load(); until != nil {
		return until.UTC()
	}
	return time.Time{}
}

var _ state.OwnerLeases = (*Store)(nil)

// InstanceLive implements state.OwnerLeases: instance is presumed alive
// while it has a lease with at least half of it left. A live instance
// renews every Lease/3, so its lease never has less than two thirds left
// but for a slow renewal; with less than half left it has missed a
// renewal and then some (a sixth of the lease, for a slow renewal): it is
// presumed dead, well before its lease runs out and its sent records
// become unknown. What is left of the lease is read on the database's
// clock. An instance without a row, or whose
// lease ran out or was given up, is dead. Every instance is assumed to
// run with the same lease as this one. This instance is always alive to
// itself.
func (s *Store) InstanceLive(ctx context.Context, instance string) (bool, error) {
	if instance == s.opts.InstanceID {
		return true, nil
	}
	if err := s.enter(ctx); err != nil {
		return false, err
	}
	defer s.exit()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	var left int64 // µs, on the database's clock
	err := s.pool.QueryRow(ctx, sqlLeaseLeft, textCol(instance)).Scan(&left)
	s.reportRead(ctx, err)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, wrapErr(err)
	}
	return time.Duration(left)*time.Microsecond >= s.opts.Lease/2, nil
}

// sqlLeaseLeft is how much of instance $1's lease is left, in µs, on the
// database's clock (negative once it has run out).
const sqlLeaseLeft = `SELECT (extract(epoch FROM lease_until - now()) * 1000000)::int8 FROM instances WHERE id = $1`

// sqlLeaseFor is the lease's end for a renewal of $n µs sent now: the
// database's clock, the one every instance compares leases with, so that
// the instances' clocks need not agree. The instance itself counts its
// lease from when it sent the renewal (on its own clock), which is no
// later: it lets the lease go no later than the others take it for run
// out, as long as the clocks run at the same rate.
func sqlLeaseFor(n int) string {
	return fmt.Sprintf("now() + $%d::int8 * interval '1 microsecond'", n)
}

// claim registers the instance at Open. An instance row whose lease is
// still held by another process is refused (unless Options.TakeOver ends
// that lease first); one whose
// lease ran out belonged to an earlier run of this instance, whose sent
// records are turned into unknown with those of every other dead instance
// before the lease is taken.
func (s *Store) claim(ctx context.Context) error {
	now := s.now()
	var until time.Time
	var held bool
	err := s.pool.QueryRow(ctx, `SELECT lease_until, lease_until > now() FROM instances WHERE id = $1`, s.opts.InstanceID).Scan(&until, &held)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return wrapErr(err)
	case held && s.opts.TakeOver:
		s.log.Warn("taking over an instance id whose lease is held", "instance", s.opts.InstanceID, "lease_until", until)
		if _, err := s.pool.Exec(ctx, `UPDATE instances SET lease_until = now() WHERE id = $1`, s.opts.InstanceID); err != nil {
			return wrapErr(err)
		}
	case held:
		return fmt.Errorf("%w: instance %q holds a lease until %s: another process runs with this instance id",
			ErrInstanceInUse, s.opts.InstanceID, until.UTC().Format(time.RFC3339))
	}
	if n, err := s.expireDead(ctx, ""); err != nil {
		return err
	} else if n > 0 {
		s.log.Warn("sent records of dead instances are now unknown", "records", n)
	}
	now = s.now()
	tag, err := s.pool.Exec(ctx, `INSERT INTO instances AS i (id, host, pid, token, started, lease_until)
		VALUES ($1, $2, $3, $4, $5, `+sqlLeaseFor(6)+`)
		ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, token = EXCLUDED.token,
			started = EXCLUDED.started, lease_until = EXCLUDED.lease_until
		WHERE i.lease_until <= now()`,
		s.opts.InstanceID, textCol(s.host), os.Getpid(), s.token, now, s.opts.Lease.Microseconds())
	if err != nil {
		return wrapErr(err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: instance %q was claimed by another process while this one started", ErrInstanceInUse, s.opts.InstanceID)
	}
	s.setLeaseUntil(now.Add(s.opts.Lease))
	return nil
}

// Renew extends the instance's lease to now + Lease. The heartbeat calls
// it every Lease/3; it fails when the database cannot be reached or when
// another process took the instance over (the lease is then lost).
func (s *Store) Renew(ctx context.Context) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	return s.renew(ctx)
}

func (s *Store) renew(ctx context.Context) error {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	until := s.now().Add(s.opts.Lease)
	tag, err := s.pool.Exec(ctx, `UPDATE instances SET lease_until = `+sqlLeaseFor(3)+` WHERE id = $1 AND token = $2`,
		s.opts.InstanceID, s.token, s.opts.Lease.Microseconds())
	if !errors.Is(err, context.DeadlineExceeded) {
		// A renewal's own timeout says little of the database: another
		// renewal may be under way beside it (heartbeat), and the
		// statements of the store report its health.
		s.health.reportWrite(err)
	}
	if err != nil {
		return wrapErr(err)
	}
	if tag.RowsAffected() != 1 {
		s.takenOver.Store(true)
		s.leaseUntil.Store(nil)
		return fmt.Errorf("%w: instance %q was taken over by another process", ErrInstanceInUse, s.opts.InstanceID)
	}
	s.setLeaseUntil(until)
	return nil
}

// release ends the lease at Close, so that the other instances take over
// this one's sent records without waiting for it to run out; then it gives
// up this one's claims on queued receipts and MO (it delivers nothing
// more), so that the others deliver them without waiting for the claims to
// run out. Two statements: the claims (a scan of the queue, which may wait
// for a row another transaction holds) must not hold the lease back; they
// are released only while the instance is still this process's (its
// token).
func (s *Store) release() {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	s.leaseUntil.Store(nil)
	if _, err := s.pool.Exec(ctx, `UPDATE instances SET lease_until = now() WHERE id = $1 AND token = $2`,
		s.opts.InstanceID, s.token); err != nil {
		s.log.Warn("giving up the instance lease failed; it runs out by itself", "instance", s.opts.InstanceID, "err", err)
		return
	}
	if _, err := s.pool.Exec(ctx, sqlReleaseClaims, s.opts.InstanceID, s.token); err != nil {
		s.log.Warn("giving up the instance's claims on queued receipts failed; they run out by themselves", "instance", s.opts.InstanceID, "err", err)
	}
}

// sqlReleaseClaims gives up the claims of instance $1's process of token
// $2 on queue entries (claimOwner), while the instance is still that
// process's.
const sqlReleaseClaims = `UPDATE queue_entries SET claimed_by = NULL, claimed_until_ns = 0
	WHERE claimed_by = $1 || '/' || $2 AND EXISTS (SELECT 1 FROM instances WHERE id = $1 AND token = $2)`

// sqlExpireDead turns into unknown the live sent records whose owner
// instance is not $3 (when set) and holds no lease now, on the database's
// clock (an owner without an instance part has none), locking them in key order
// (the order of the committer's batches); $2 is the history event.
// The records are found through the records_sent index: the expiry is
// tested as an expression (+ 0), which the expiry index cannot serve, so
// the planner never reads every live record through it.
const sqlExpireDead = `UPDATE records r
	SET state = 'unknown', history = cap_history(r.history || $2::bytea[], 64), wseq = nextval('record_wseq')
	FROM (SELECT account, key, segment FROM records x
		WHERE x.state = 'sent' AND x.expires_ns + 0 > $1 AND ($3 = '' OR x.owner_instance <> $3)
		AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = x.owner_instance AND i.lease_until > now())
		ORDER BY account, key, segment
		FOR UPDATE) dead
	WHERE r.account = dead.account AND r.key = dead.key AND r.segment = dead.segment AND r.state = 'sent'`

// ExpireDeadOwners turns every live sent record whose owner instance no
// longer holds a lease (it stopped, crashed or lost the database for
// longer than its lease) into unknown, with a history event, and returns
// how many it turned. Records of live instances, and this instance's own,
// are never touched. Open calls it, and the heartbeat every Lease.
func (s *Store) ExpireDeadOwners(ctx context.Context) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.exit()
	return s.expireDead(ctx, s.opts.InstanceID)
}

func (s *Store) expireDead(ctx context.Context, self string) (int, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	now := s.now()
	ev := state.Event{At: now, State: state.Unknown, Note: state.NoteLeaseExpired}
	var n int64
	for range 4 {
		var err error
		n, err = s.execIndexScanned(ctx, sqlExpireDead, unixNano(now), [][]byte{encodeEvent(&ev)}, self)
		if isRetryable(err) {
			continue
		}
		s.reportRead(ctx, err)
		if err != nil {
			return 0, wrapErr(err)
		}
		break
	}
	return int(n), nil
}

// sqlIndexScans makes the statements after it in its transaction read
// through indexes one entry at a time, neither scanning the table nor
// building bitmaps, whatever the planner estimates. The sweeps of the
// maintenance run every few seconds against the busiest table, whose
// statistics lag what it holds:
//   - the expiry sweep found its rows by scanning the whole table (measured
//     45-230 ms every sweep with ~100k records, and growing with them);
//   - the records_sent index keeps an entry for every record created since
//     the last vacuum, most of them no longer sent. A bitmap scan of it
//     visits each of those rows at every sweep; an index scan marks the
//     entries of rows no transaction can see any more as dead (the
//     executor's kill_prior_tuple), so the next sweep skips them.
const sqlIndexScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)`

// execIndexScanned runs sql after sqlIndexScans, in one transaction, and
// returns the rows it changed.
func (s *Store) execIndexScanned(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	b := &pgx.Batch{}
	b.Queue(sqlIndexScans)
	b.Queue(sql, args...).Exec(func(tag pgconn.CommandTag) error {
		n = tag.RowsAffected()
		return nil
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return 0, err
	}
	return n, nil
}

// heartbeat renews the lease every Lease/3, on a goroutine of its own:
// the maintenance (maintain) may wait for row locks or sweep for a while,
// and a renewal held back behind it would let the lease of a live
// instance run out. It looks every Lease/12 and starts a renewal when the
// last one started a third of the lease ago, or a twelfth after the last
// one failed, or a sixth after one that is still in flight (a database
// hiccup, a lock): that one is not waited for, another starts beside it
// (at most maxRenewals at once, each bounded by the store's Timeout), so
// one that hangs while the database is fine again does not let the lease
// enter its margin, and a slow but answered one still counts. Close waits
// for the renewals in flight: none ends after the lease was given up.
func (s *Store) heartbeat() {
	defer s.maintenance.Done()
	type renewal struct {
		start time.Time
		err   error
	}
	results := make(chan renewal, maxRenewals)
	failing := false
	var lastOK, lastWarn time.Time // lastOK: when the latest renewal that succeeded started
	lastStart := time.Now()
	tick := max(s.opts.Lease/12, time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		var now time.Time
		select {
		case <-s.stop:
			for ; s.renewing.Load() > 0; s.renewing.Add(-1) {
				<-results
			}
			return
		case r := <-results:
			s.renewing.Add(-1)
			switch {
			case r.err == nil:
				if failing {
					s.log.Info("instance lease renewed again", "instance", s.opts.InstanceID)
				}
				failing, lastOK = false, later(lastOK, r.start)
			case r.start.Before(lastOK):
				// One that hung, overtaken by a later one that succeeded.
			case !failing || time.Since(lastWarn) >= s.opts.Lease:
				// The first failure, then one line a lease while they last.
				failing, lastWarn = true, time.Now()
				s.log.Warn("instance lease not renewed", "instance", s.opts.InstanceID, "err", r.err, "lease_until", s.LeaseUntil())
			}
			continue
		case now = <-t.C:
		}
		n, due := s.renewing.Load(), s.opts.Lease/3
		switch {
		case n > 0:
			due = s.opts.Lease / 6 // beside the one in flight
		case failing:
			due = s.opts.Lease / 12
		}
		// Ticks come on a schedule of their own: half a tick of slack, so
		// that one handled a little early does not put a renewal off by a
		// whole tick.
		if now.Sub(lastStart)+tick/2 >= due && n < maxRenewals {
			s.renewing.Add(1)
			lastStart = now
			go func() { results <- renewal{now, s.renew(context.Background())} }()
		}
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// maxRenewals is how many renewals may be in flight at once.
const maxRenewals = 3

// maintain, every Lease while the instance holds its lease, takes over
// the records of dead instances and deletes expired rows.
func (s *Store) maintain() {
	defer s.maintenance.Done()
	t := time.NewTicker(s.opts.Lease)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if !s.Lease() {
			continue
		}
		ctx := context.Background()
		if k, err := s.expireDead(ctx, s.opts.InstanceID); err != nil {
			s.log.Warn("taking over the records of dead instances failed", "err", err)
		} else if k > 0 {
			s.log.Warn("sent records of dead instances are now unknown", "records", k)
		}
		if err := s.collect(ctx); err != nil {
			s.log.Warn("deleting expired rows failed", "err", err)
		}
	}
}

// gcLimit is the most expired rows of one table a delete statement
// removes; a sweep repeats it until a table has no more (or its time is
// up).
const gcLimit = 10000

// collect deletes expired records, queue entries and dedup markers, in
// statements of at most gcLimit rows, for at most Lease/3. A row another
// transaction holds (a create replacing an expired record) is skipped, not
// waited for: collect takes its rows in their physical order, the writers
// in key order, and waiting could deadlock the two.
//
// Expiry is reckoned on this instance's clock (as the records' expiry was
// set), and the sweep deletes every instance's rows: an instance whose
// clock is ahead of the database's by more than maxSweepAhead deletes
// nothing (an error), or it would delete live records of all instances,
// and their retries would be forwarded again (from review).
func (s *Store) collect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(s.opts.Lease/3, s.opts.Timeout))
	defer cancel()
	at := s.now()
	var dbNs int64
	if err := s.pool.QueryRow(ctx, `SELECT `+sqlNowNS).Scan(&dbNs); err != nil {
		return wrapErr(err)
	}
	if ahead := at.Sub(time.Unix(0, dbNs)); ahead > maxSweepAhead {
		return fmt.Errorf("%w: this instance's clock is %v ahead of the database's, so it deletes no expired row (it would delete live ones) until the clock is set right",
			ErrClockAhead, ahead.Round(time.Second))
	}
	now := unixNano(at)
	for _, table := range expiringTables {
		for {
			n, err := s.execIndexScanned(ctx, sqlSweep(table), now)
			if err != nil {
				return wrapErr(err)
			}
			if n < gcLimit {
				break
			}
		}
	}
	return nil
}

// maxSweepAhead is how far ahead of the database's clock an instance's
// may be and still delete expired rows (collect).
const maxSweepAhead = time.Minute

// ErrClockAhead: this instance's clock is ahead of the database's by more
// than a minute; it deletes no expired row.
var ErrClockAhead = errors.New("pgstore: clock ahead of the database's")

// expiringTables are the tables collect sweeps, each with a btree index
// on expires_ns.
var expiringTables = []string{"records", "queue_entries", "queue_markers"}

// sqlSweep deletes up to gcLimit rows of table expired at $1, found
// through its expires_ns index in expiry order (run after sqlIndexScans,
// so that a sweep reads the expired rows and not the table).
func sqlSweep(table string) string {
	return `DELETE FROM ` + table + ` WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM ` + table + ` WHERE expires_ns <= $1 ORDER BY expires_ns LIMIT ` + fmt.Sprint(gcLimit) + ` FOR UPDATE SKIP LOCKED))
		AND expires_ns <= $1`
}

// Status is what `smppproxy store status` shows of a shared store.
type Status struct {
	Schema string
	// Version is the schema's version; Want is this build's.
	Version, Want int
	Instances     []Instance
	// Records counts the live records by state, over the first
	// StatusCountLimit read; RecordsCapped: the store holds more (the
	// counts are then of those only).
	Records       map[state.SubmitState]int
	RecordsCapped bool `json:",omitempty"`
	// Queued counts the live queue entries.
	Queued int
}

// Instance is one proxy instance registered in the store.
type Instance struct {
	ID, Host   string
	PID        int
	Started    time.Time
	LeaseUntil time.Time
	// Live: the lease had not run out at the time of the status (on the
	// database's clock).
	Live bool
}

// Status reports the schema version, the instances and their leases and
// the records by state.
func (s *Store) Status(ctx context.Context) (Status, error) {
	if err := s.enter(ctx); err != nil {
		return Status{}, err
	}
	defer s.exit()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	return readStatus(ctx, s.pool, s.opts.Schema, s.now(), StatusCountLimit)
}

// StatusCountLimit bounds the records a status counts: a million take
// ~1–2 s of the database's CPU here, and a store holds every record of
// its retention (hours of traffic), which a count of all would read on
// every call.
const StatusCountLimit = 1_000_000

// ReadStatus is Status without opening a Store (which would register an
// instance): for `smppproxy store status`.
func ReadStatus(ctx context.Context, dsn, schema string) (Status, error) {
	if !schemaName.MatchString(schema) {
		return Status{}, fmt.Errorf("pgstore: schema name %q: want lower-case letters, digits and _", schema)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return Status{}, fmt.Errorf("pgstore: DSN: %w", err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return Status{}, fmt.Errorf("pgstore: %w", err)
	}
	defer pool.Close()
	return readStatus(ctx, pool, schema, time.Now(), StatusCountLimit)
}

func readStatus(ctx context.Context, pool *pgxpool.Pool, schema string, now time.Time, limit int) (Status, error) {
	st := Status{Schema: schema, Want: SchemaVersion(), Records: map[state.SubmitState]int{}}
	var err error
	if st.Version, err = readVersion(ctx, pool, schema); err != nil || st.Version == 0 {
		return st, err
	}
	rows, err := pool.Query(ctx, `SELECT id, host, pid, started, lease_until, lease_until > now() FROM instances ORDER BY id`)
	if err != nil {
		return st, wrapErr(err)
	}
	st.Instances, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Instance, error) {
		var in Instance
		err := row.Scan(&in.ID, &in.Host, &in.PID, &in.Started, &in.LeaseUntil, &in.Live)
		in.Started, in.LeaseUntil = in.Started.UTC(), in.LeaseUntil.UTC()
		return in, err
	})
	if err != nil {
		return st, wrapErr(err)
	}
	counts, complete, err := countStates(ctx, pool, unixNano(now), limit)
	if err != nil {
		return st, wrapErr(err)
	}
	st.Records, st.RecordsCapped = counts, !complete
	err = pool.QueryRow(ctx, `SELECT count(*) FROM queue_entries WHERE expires_ns > $1`, unixNano(now)).Scan(&st.Queued)
	return st, wrapErr(err)
}
