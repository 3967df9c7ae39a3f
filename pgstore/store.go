// Package pgstore is the PostgreSQL backend of state.Store and
// state.Queue: several proxy instances share one store.
//
// A record is one row of table records: the key and everything an index
// matches are columns (bytea, so any bytes round-trip), the rest is the
// package's binary encoding (body) and the history an array of encoded
// events, capped like Badger's (the first event and the latest). Writes of
// Create, Replace, Update, Enqueue and Ack go through a group committer:
// the requests waiting are sent as one pipelined batch (the Creates as one
// multi-row statement, the Replaces as another, the Enqueues as a third)
// that PostgreSQL runs as one implicit transaction with one WAL flush
// (synchronous_commit stays on), while the next batch gathers; a batch's
// Enqueues, which take the lock that serialises every instance's, are a
// second transaction beside it, with the writes of the records they mark.
// Reads by key (Get, and Update's) are grouped the same way, one statement
// per group, and so are a receipt's lookups by message id
// (ByMessageIDHot).
// A receipt's intake is one write request (EnqueueAppend: its entry and
// its record's mark in the batch's statement of enqueues). Update reads
// the record, calls fn and writes the result in the batch on condition
// that nobody wrote the record since; otherwise it runs again in a
// transaction of its own that locks the row (SELECT … FOR UPDATE).
//
// Every instance holds a lease in table instances, renewed every Lease/3;
// ExpireDeadOwners turns the sent records of instances whose lease ran
// out into unknown. Leases are written and compared on the database's
// clock, so an instance whose clock is off does not take a live one for
// dead; an instance counts its own lease from when it sent the renewal,
// on its clock (Options.Now, monotonic with time.Now). Records' times
// (expiry, the fingerprint window the engine reads) are each instance's
// clock: those clocks must agree to within seconds.
//
// The schema is versioned (migrations embedded in the binary, applied by
// Migrate under an advisory lock); Open refuses a schema that is behind
// unless Options.Migrate is set.
package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/smppproxy/smppproxy/state"
)

// Options configure Open. DSN, Schema and InstanceID are required.
type Options struct {
	// DSN is the PostgreSQL connection string (URL or key=value form).
	DSN string
	// Schema holds the store's tables: lower-case letters, digits and
	// underscores, not starting with a digit.
	Schema string
	// InstanceID names this proxy instance among those sharing the store;
	// record owners are InstanceID + "/" + n. It must be unique among the
	// live instances: Open refuses an ID whose lease another process
	// holds.
	InstanceID string
	// TakeOver claims InstanceID even while its lease is held: the
	// operator asserts that the process holding it is dead (a restart
	// right after a crash), so its sent records become unknown at once.
	TakeOver bool
	// Lease is how long the instance's lease lasts after each renewal
	// (every Lease/3); zero means 30 s.
	Lease time.Duration
	// MaxConns caps the connection pool; zero means 8.
	MaxConns int32
	// Migrate applies missing migrations at Open; without it Open fails
	// when the schema is behind this build.
	Migrate bool
	// Timeout bounds every database operation (a write batch, a read, a
	// connection attempt), whatever the caller's context; zero means 5 s.
	Timeout time.Duration
	// Now is the clock of expiry and of the instance's own view of its
	// lease (Lease); nil means time.Now. Leases are compared on the
	// database's clock.
	Now func() time.Time
	// Logger receives the store's own log lines; nil discards them.
	Logger *slog.Logger
}

// Errors of the package. Compare with errors.Is.
var (
	// ErrUnavailable: the database could not be reached; the store keeps
	// trying (with back-off) and the operation was not done.
	ErrUnavailable = errors.New("pgstore: database unavailable")
	// ErrSchemaVersion: the schema is not at the version this build uses.
	ErrSchemaVersion = errors.New("pgstore: schema version mismatch")
	// ErrInstanceInUse: another live process holds the instance's lease.
	ErrInstanceInUse = errors.New("pgstore: instance id in use")
	// ErrChanged: a Replace found the record no longer the one its writer
	// held (another instance changed it: it took over the sent records of
	// a lease that ran out); nothing was written.
	ErrChanged = errors.New("pgstore: record changed by another writer")
)

// Store is a state.Store and state.Queue on PostgreSQL. It is safe for
// concurrent use.
type Store struct {
	pool  *pgxpool.Pool
	opts  Options
	now   func() time.Time
	log   *slog.Logger
	token string // this process's claim on the instance row
	host  string

	mu       sync.RWMutex // guards closed against enter
	closed   bool
	inflight sync.WaitGroup

	reqs        chan *request
	batches     chan []*request
	gate        *pipeGate // paces batches (see pipeGate)
	reads       chan *keyRead
	readBatches chan []*keyRead
	commitDone  sync.WaitGroup
	stop        chan struct{}
	listen      listeners // Subscribe's functions and its LISTEN loop
	maintenance sync.WaitGroup

	// leaseUntil is when the lease last renewed runs out for this
	// instance (nil: none): Options.Now when the renewal was sent plus
	// the lease, with the monotonic clock reading time.Now gives, so that
	// a step of the wall clock does not stretch it.
	leaseUntil atomic.Pointer[time.Time]
	renewing   atomic.Int32 // renewals in flight (heartbeat)
	takenOver  atomic.Bool  // a renewal found the instance another process's
	health     health
	commits    atomic.Uint64 // batches committed
	ops        atomic.Uint64 // write requests committed
	execNanos  atomic.Uint64 // time spent sending batches and reading their results
}

var (
	_ state.Store = (*Store)(nil)
	_ state.Queue = (*Store)(nil)
)

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Committer sizing.
const (
	queueSize  = 8192 // write requests waiting for the committer
	maxBatch   = 512  // write requests per batch
	committers = 2    // batches in flight at once
	// eagerBatch: the requests a batch needs to go while another is in
	// flight, unless that one has taken maxHold (see pipeGate). Fuller
	// batches cost both sides less per write: with two instances on one
	// 2-core machine, 96 instead of 32 gave ~7% more submits/s and ~10%
	// less of PostgreSQL's CPU per submit; one instance the same.
	eagerBatch = 96
	maxHold    = 5 * time.Millisecond
)

func (o *Options) setDefaults() error {
	switch {
	case o.DSN == "":
		return errors.New("pgstore: Options.DSN is empty")
	case !schemaName.MatchString(o.Schema):
		return fmt.Errorf("pgstore: schema name %q: want lower-case letters, digits and _", o.Schema)
	case o.InstanceID == "" || !utf8.ValidString(o.InstanceID) || strings.ContainsAny(o.InstanceID, "\x00/"):
		return fmt.Errorf("pgstore: instance id %q: want non-empty UTF-8 without / or NUL", o.InstanceID)
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 12 // above config.MinMaxConns
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Open connects to the database, checks (or with Migrate, brings up to
// date) the schema, claims the instance's lease, turns the sent records of
// dead instances into unknown and starts the committer and the lease
// heartbeat. Close releases all of it.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if opts.Migrate {
		if err := Migrate(ctx, opts.DSN, opts.Schema); err != nil {
			return nil, err
		}
	}
	pool, err := newPool(ctx, opts)
	if err != nil {
		return nil, err
	}
	s := &Store{
		pool: pool, opts: opts, now: opts.Now, log: opts.Logger.With("store", "postgres", "schema", opts.Schema),
		token: randomToken(), reqs: make(chan *request, queueSize), batches: make(chan []*request), gate: newPipeGate(eagerBatch, maxHold), stop: make(chan struct{}),
		reads: make(chan *keyRead, queueSize), readBatches: make(chan []*keyRead),
	}
	s.health.onReadOnly = pool.Reset
	s.host, _ = os.Hostname()
	if err := s.start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*s.opts.Timeout)
	defer cancel()
	if err := checkVersion(ctx, s.pool, s.opts.Schema); err != nil {
		return err
	}
	if err := s.claim(ctx); err != nil {
		return err
	}
	s.commitDone.Add(1 + committers + 1 + readers)
	go func() {
		defer s.commitDone.Done()
		gatherBatches(s.reqs, s.batches, maxBatch, s.gate)
	}()
	for range committers {
		go s.commitLoop()
	}
	go func() {
		defer s.commitDone.Done()
		gatherBatches(s.reads, s.readBatches, maxBatch, nil)
	}()
	for range readers {
		go s.readLoop()
	}
	s.maintenance.Add(2)
	go s.heartbeat()
	go s.maintain()
	return nil
}

func newPool(ctx context.Context, opts Options) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(opts.DSN)
	if err != nil {
		return nil, fmt.Errorf("pgstore: DSN: %w", err)
	}
	cfg.MaxConns = opts.MaxConns
	cfg.ConnConfig.RuntimeParams["search_path"] = opts.Schema

	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "smppproxy " + textCol(opts.InstanceID)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > opts.Timeout {
		cfg.ConnConfig.ConnectTimeout = opts.Timeout
	}
	// A context that ends mid-statement breaks the connection at once
	// (the default sends a cancel request over a new connection first,
	// which hangs when the database does).
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		registerRawArrays(c.TypeMap())
		return syncCommits(ctx, c)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	return pool, nil
}

// syncCommits makes the connection's commits wait for their WAL to be
// flushed. A journal or outcome is durable only then: a role or database
// set to synchronous_commit off (a common tuning), local or remote_write
// would have the store report writes durable that a crash of the database
// (or, with a synchronous standby, a failover) loses, and the retries of
// those keys be forwarded again (from review). remote_apply, stronger, is
// kept, whoever set it. A SET rather than a parameter of the connection
// request, which a pooler (PgBouncer) refuses unless told to track it.
func syncCommits(ctx context.Context, c *pgx.Conn) error {
	var cur string
	if err := c.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&cur); err != nil {
		return err
	}
	if cur == "on" || cur == "remote_apply" {
		return nil
	}
	_, err := c.Exec(ctx, `SET synchronous_commit = on`)
	return err
}

// Writable reports the database failing the store's writes: the last
// write's failure to reach it, or its refusal to write (read-only, as
// during a failover), while no write has succeeded since (readiness:
// reads may still work while writes do not).
func (s *Store) Writable() error { return s.health.writable() }

func randomToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// enter registers an operation, or refuses it once the store is closed.
func (s *Store) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return state.ErrClosed
	}
	s.inflight.Add(1)
	return nil
}

func (s *Store) exit() { s.inflight.Done() }

// opCtx bounds ctx by Options.Timeout.
func (s *Store) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.Timeout)
}

// Close stops the committer after the writes already queued, gives up the
// lease (so the other instances may take over this one's sent records at
// once) and closes the pool. Later calls return state.ErrClosed; a second
// Close returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.inflight.Wait()
	close(s.reqs)
	close(s.reads)
	s.commitDone.Wait()
	close(s.stop)
	s.maintenance.Wait()
	s.release()
	closed := make(chan struct{})
	go func() { s.pool.Close(); close(closed) }()
	t := time.NewTimer(s.opts.Timeout)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		// pgx closes a connection broken mid-statement with a cancel
		// request that may wait 15 s on a database that does not answer.
		s.log.Warn("connections still closing in the background", "after", s.opts.Timeout)
	}
	return nil
}

// CommitStats reports the group commits so far: transactions committed
// (a batch with enqueues and other writes is two, run side by side, whose
// times both count in busy), the write requests they carried and the time
// spent running them (sent, executed, committed and answered).
func (s *Store) CommitStats() (batches, ops uint64, busy time.Duration) {
	return s.commits.Load(), s.ops.Load(), time.Duration(s.execNanos.Load())
}
