package state

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// BadgerOptions configures OpenBadger. Zero values are documented per field.
type BadgerOptions struct {
	// Path is the database directory, created if missing. Required unless
	// InMemory.
	Path string
	// InMemory keeps everything in memory (nothing is durable); for
	// benchmarks and throwaway demos only.
	InMemory bool
	// Logger receives Badger's errors and warnings; its informational
	// chatter is logged at debug level. Nil discards everything.
	Logger *slog.Logger
	// MaxBatch is the most write requests committed in one transaction
	// (one sync); a batch also ends at the size Badger takes in one
	// transaction (15% of MemtableSize). Zero means 8192.
	MaxBatch int
	// QueueSize bounds the requests waiting for the committer; a writer
	// blocks (honouring its context) while it is full. Zero means
	// 4 × MaxBatch.
	QueueSize int
	// GCInterval is the period of value-log garbage collection. Zero
	// means 10 minutes; negative disables it.
	GCInterval time.Duration
	// Now is the clock that decides expiry (tests inject one). Nil means
	// time.Now.
	Now func() time.Time
	// MinFreeBytes: while the file system holding Path has less free
	// space than this, writes fail with ErrDiskFull. Badger writes through
	// memory-mapped files, and a store into a mapped page the file system
	// cannot allocate kills the process (SIGBUS) instead of returning an
	// error; this guard turns a filling disk into clean refusals first.
	// Zero means 512 MiB; negative disables the guard.
	MinFreeBytes int64

	// ForceEmpty starts on a store that lost data (see ErrStoreDamaged)
	// instead of refusing it: what Badger can still read is kept (possibly
	// nothing), a fresh marker is written, and the commits known lost are
	// reported in BadgerStats.LostCommits. serve --force-empty-store.
	ForceEmpty bool
	// CheckpointInterval is how often the store's high-water mark (its
	// commit count) is copied, synced, into the marker file, which is what
	// lets a later open notice commits lost with the tail of the
	// write-ahead log after an OS crash (HWMFile covers a process crash).
	// Zero means one second; negative disables the periodic copy (Close
	// still writes it).
	CheckpointInterval time.Duration

	// Memory. Badger keeps up to NumMemtables memtables of MemtableSize
	// (the one being written and those waiting to be flushed; each also
	// bounds its write-ahead log, which is mapped and synced whole, and
	// which is replayed at open), a block cache of BlockCacheSize and an
	// index cache of IndexCacheSize (0 there: table indexes stay in
	// memory, outside any cache). Values of at least ValueThreshold bytes
	// go to the value log instead of the tree. Zero means the default:
	// DefaultMemtableSize, DefaultNumMemtables, DefaultBlockCacheSize,
	// DefaultIndexCacheSize, DefaultValueThreshold.
	MemtableSize   int64
	NumMemtables   int
	BlockCacheSize int64
	IndexCacheSize int64
	ValueThreshold int64
	// TableSize is the size of Badger's tables on every level (zero:
	// DefaultTableSize). A table is built in memory before it is written,
	// with its blocks both raw and compressed, at several times its size:
	// smaller tables make the compactions' peaks of memory smaller, and
	// more files (each open and mapped while the store runs).
	TableSize int64

	// CommitDelay, when positive, lets a group commit wait up to this
	// long for more writes while they arrive often enough to bring at
	// least two more within it (see gatherer): fewer, fuller commits, for
	// less CPU per write at a modest rate, at the price of that wait.
	// Zero (the default): a batch goes as soon as the one before it is
	// durable.
	CommitDelay time.Duration

	// NoCommitLog turns the store's own commit log off: Badger then
	// syncs its memtable log on every commit, as before the log existed
	// (kept for one release, as a way back). With the log (commitlog.go),
	// each batch is appended to a log file with one write and one
	// fdatasync, and Badger applies it without syncing its memtable log
	// (whose msync costs several times as much); the log is replayed at
	// open and trimmed at checkpoints once Badger holds its batches
	// durably. Every value then stays in Badger's tree (ValueThreshold is
	// raised to Badger's maximum): its value log is not synced per
	// commit. A log left by an earlier run is replayed at open either way.
	// Ignored InMemory.
	NoCommitLog bool

	// trimSyncAfter (tests in this package) replaces the constant
	// (negative: at once).
	trimSyncAfter time.Duration
	// commitLogRotate (tests in this package) replaces the size at
	// which a commit log segment is closed and a new one started.
	commitLogRotate int64
	// unlimitedBatch (tests in this package) ends batches at MaxBatch
	// only, so that a batch can exceed one Badger transaction.
	unlimitedBatch bool
	// tune, when set (by tests in this package), adjusts Badger's options.
	tune func(badger.Options) badger.Options
	// diskFree, when set (by tests in this package), replaces the
	// free-space probe.
	diskFree func(path string) (uint64, bool)
	// diskCheckEvery (tests in this package) replaces the longest time
	// between two readings of the free space (negative: every batch).
	diskCheckEvery time.Duration
	// noKeyFilter (tests and benchmarks in this package) turns the filter
	// of record keys off: every lookup reads Badger.
	noKeyFilter bool
	// keyFilterMinRoom (tests in this package) replaces the least number
	// of keys the filter is sized for.
	keyFilterMinRoom uint
	// noRowCache (tests and benchmarks in this package): every read of a
	// record or an index entry is Badger's.
	noRowCache bool
	// onRecordLookup, when set (by tests in this package), is called each
	// time a read of a record searches Badger (neither the filter of keys
	// held nor the row cache answered it).
	onRecordLookup func()
	// onAllocRelease, when set (by tests in this package), is called each
	// time an allocator Badger returned to its pool is released
	// (allocpool.go).
	onAllocRelease func()
	// tablePagesEvery (tests in this package) replaces the time between
	// two passes over the pages of Badger's tables (tablepages.go);
	// onTablePages, when set, is called after each pass with the number of
	// tables it advised.
	tablePagesEvery time.Duration
	onTablePages    func(tables int)
	// onCommitHold, when set (by tests in this package), is called each
	// time the committer holds a batch back for more writes (CommitDelay).
	onCommitHold func()
}

// Defaults of the memory options of BadgerOptions (see there), measured
// with a million records (BenchmarkBadgerOpen1M): Badger's own memory is
// then ~40 MiB (two memtable arenas of ~2.5 × MemtableSize, the caches),
// the Go heap peaks at about twice that unless a memory limit holds it
// (serve sets one: memory_limit), and the tables Badger memory-maps add
// reclaimable file-backed pages on top.
// Smaller memtables also make a store quicker to open (less log to
// replay); a batch is bounded by 15% of MemtableSize (~1 MiB, over a
// thousand writes).
const (
	DefaultMemtableSize   = 8 << 20
	DefaultNumMemtables   = 2
	DefaultBlockCacheSize = 8 << 20
	DefaultIndexCacheSize = 8 << 20
	DefaultValueThreshold = 1 << 10
)

// Table settings: tables of DefaultTableSize on every level unless
// BadgerOptions.TableSize says otherwise, compressed with
// DefaultCompression (Badger's default, not an option). Badger
// memory-maps its tables, and every page of a table it writes or reads
// stays mapped until the store's next pass over them (tablepages.go), so
// what compactions write and read between two passes is part of the
// process's RSS. zstd made the tables
// 15-25% smaller in the store-only benchmark (BenchmarkBadgerMemory1M),
// but with the proxy and a million keys it lowered neither the peak RSS
// nor the file-backed part and cost ~8% of the submits per second, so
// the tables stay in snappy. A table records its compression: a store
// written with another one reads as before.
const (
	DefaultTableSize   = 1 << 20
	DefaultCompression = "snappy"
)

// ErrDiskFull: BadgerStore refused a write because the disk is (nearly)
// full; see BadgerOptions.MinFreeBytes. Nothing was written.
var ErrDiskFull = errors.New("state: disk full")

// BadgerStats counts the committer's work since OpenBadger.
type BadgerStats struct {
	// Ops is the number of write requests (Create, Update) handled.
	Ops uint64
	// Commits is the number of transactions committed, each one fsync.
	// Ops/Commits is the group-commit factor.
	Commits uint64
	// Failed is the number of write requests answered with an error
	// because their transaction could not be committed.
	Failed uint64
	// LostCommits is the number of commits found missing when the store
	// was opened with ForceEmpty (see ErrStoreDamaged); 0 otherwise.
	LostCommits uint64
}

// BadgerStore is the production Store on Badger (github.com/dgraph-io/badger).
//
// Writes go through a pipelined group commit (write.go, committer.go).
// A record write (Create, Update, Replace) is decided in its caller's
// goroutine, under a lock of its record key held until the write is
// durable, against a snapshot that holds every write that has returned;
// the caller encodes its writes and hands them to the single committer
// goroutine, which gathers what arrives while the previous transaction is
// applied and synced (at most one is in Badger's hands) into the next
// one: up to MaxBatch requests, and what Badger takes in one transaction.
// Each batch is made durable by the store's commit log (commitlog.go: one
// write and one fdatasync per batch, while Badger applies the batch
// without syncing its own log), or, with NoCommitLog, by Badger's
// SyncWrites; only then, and once Badger has applied it and the snapshot
// is renewed, are its waiters released. If a commit fails,
// every request of it, and of the batch being gathered (which may have
// been decided on its writes), gets the (wrapped) error and must be
// treated as not written. As with any failed fsync that is all a caller
// can know: Badger applies a transaction to its memtable before syncing
// its log, so after a failed sync the records may still be visible to
// reads, or even survive a restart.
//
// Update's fn runs in the caller's goroutine while the record's key (one
// of a fixed set of key locks) is held: it must be quick and must not
// write to the Store (a write from fn may deadlock).
//
// Records are stored small (codec version 4, with only the first event
// of their history); the rest of the history is an append-only event log
// under keys of its own, capped at MaxHistory events, written in the same
// transaction; an index of the
// records in state Sent serves ScanState. Its entries, and queue entries,
// are kept in the commit log, and in Badger only once the log no longer
// holds them (heldlog.go).
//
// Keys: records, their history events and indexes share one keyspace;
// the layout is described next to recordKey in codec.go.
//
// Context: a writer honours ctx only while waiting to enqueue. Once its
// request is enqueued it waits for the outcome, whatever ctx does, so that
// the answer is always the truth (a request that was committed is never
// reported as failed).
//
// Expiry: a record is absent for every method once the injected clock
// passes its Expires; Badger also drops it (and its index entries) by TTL.
// Badger's TTL is real wall-clock time: it is set to now + (Expires −
// Now()) rounded up, so an injected clock only shifts when disk space is
// reclaimed, never what the Store answers.
type BadgerStore struct {
	db       *badger.DB
	log      *slog.Logger
	now      func() time.Time
	maxBatch int
	path     string
	// commitDelay, onCommitHold: BadgerOptions'.
	commitDelay  time.Duration
	onCommitHold func()
	minFree      int64                            // <= 0: no guard
	diskFree     func(path string) (uint64, bool) // free bytes, ok
	lowDisk      bool                             // committer only: last guard verdict
	diskLow      atomic.Bool                      // lowDisk, for Writable
	// committer only: when free space was last read, and how many bytes
	// of batches may go before it is read again (see checkDisk).
	diskRead       time.Time
	diskBudget     int64
	diskCheckEvery time.Duration
	qseq           uint64 // committer only: last queue sequence number
	// hwmQueueSeq: committer only: the last queue sequence number of the
	// batches launched (batchQueueSeq), which each batch's high-water
	// mark carries.
	hwmQueueSeq uint64
	// trimSyncAfter: see truncateCommitLog (the constant, or a test's).
	trimSyncAfter time.Duration

	mark         *marker       // the store's marker; nil in memory
	commitSeq    uint64        // committer only: commits made (the high-water mark)
	committed    atomic.Uint64 // commitSeq, for the checkpoint
	checkpointed uint64        // checkpoint only: commits in the marker file
	lostCommits  uint64        // found missing at open (ForceEmpty)
	hwm          *hwmFile      // committer only (after open); nil in memory
	hwmFailing   bool          // committer only: the last HWMFile write failed
	clog         *commitLog    // nil with BadgerOptions.NoCommitLog (or InMemory)
	// held: the Sent index and queue entries the commit log holds and
	// Badger not yet (heldlog.go); nil without the commit log.
	held *heldLog

	stripes    [nStripes]sync.Mutex // record-key locks (lockKey)
	seed       maphash.Seed
	snapMu     sync.RWMutex
	snap       *snapshot // readers' view; renewed by the committer
	batchCount int64     // most writes in one transaction
	batchBytes int64     // most bytes in one transaction

	reqs          chan *request
	committerDone chan struct{}
	stopGC        chan struct{}
	stopTrim      func() // ends the trimming of Badger's allocator pool (allocpool.go)
	stopPages     func() // ends the passes over Badger's mapped tables (tablepages.go)
	gcDone        chan struct{}

	stopCheckpoint chan struct{}
	checkpointDone chan struct{}

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup // readers and writers between enter and exit

	closeOnce sync.Once
	closeErr  error

	commitObserver atomic.Pointer[func(ops int, took time.Duration)] // SetCommitObserver

	// keys: the filter of the record keys held (nil: none, every lookup
	// reads Badger); built by keyFilterLoop until stopKeys is closed.
	keys     *keyFilter
	stopKeys chan struct{}
	keysDone chan struct{}
	// rows: the values committed last of record keys and message-id
	// index entries (nil: none kept, every read is Badger's).
	rows *rowCache
	// onRecordLookup: BadgerOptions.onRecordLookup.
	onRecordLookup func()

	ops, commits, failed atomic.Uint64
}

var (
	_ Store     = (*BadgerStore)(nil)
	_ HotReader = (*BadgerStore)(nil)
	_ Queue     = (*BadgerStore)(nil)
)

// OpenBadger opens (or creates) the database and starts the committer
// and, unless disabled, the value-log GC.
func OpenBadger(opts BadgerOptions) (*BadgerStore, error) {
	if opts.Path == "" && !opts.InMemory {
		return nil, errors.New("state: OpenBadger needs a Path")
	}
	opts.setDefaults()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bo := badgerOptions(opts, log)
	db, mark, lost, err := openChecked(bo, opts, log)
	if err != nil {
		return nil, err
	}
	qseq, err := loadQueueSeq(db)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	s := &BadgerStore{
		qseq:           qseq,
		hwmQueueSeq:    qseq,
		mark:           mark,
		lostCommits:    lost,
		db:             db,
		log:            log,
		now:            opts.Now,
		maxBatch:       opts.MaxBatch,
		commitDelay:    opts.CommitDelay,
		onCommitHold:   opts.onCommitHold,
		path:           opts.Path,
		minFree:        opts.MinFreeBytes,
		trimSyncAfter:  cmp.Or(opts.trimSyncAfter, trimSyncAfter),
		diskFree:       opts.diskFree,
		onRecordLookup: opts.onRecordLookup,
		diskCheckEvery: cmp.Or(opts.diskCheckEvery, diskCheckEvery),
		seed:           maphash.MakeSeed(),
		batchCount:     db.MaxBatchCount() * 3 / 4,
		batchBytes:     db.MaxBatchSize() * 3 / 4,
		reqs:           make(chan *request, opts.QueueSize),
		committerDone:  make(chan struct{}),
		stopGC:         make(chan struct{}),
		gcDone:         make(chan struct{}),

		stopCheckpoint: make(chan struct{}),
		checkpointDone: make(chan struct{}),
		stopKeys:       make(chan struct{}),
		keysDone:       make(chan struct{}),
	}
	if err := s.prepare(opts, mark, bo.ValueThreshold); err != nil {
		_ = db.Close()
		return nil, err
	}
	s.start(opts)
	return s, nil
}

// prepare sets up what the store needs before its goroutines start: its
// caches, its marks, the index of sent records and the commit log.
func (s *BadgerStore) prepare(opts BadgerOptions, mark *marker, valueThreshold int64) error {
	if !opts.noKeyFilter {
		s.keys = newKeyFilter(cmp.Or(opts.keyFilterMinRoom, keyFilterMinRoom))
		s.loadKeyFilter(mark)
	}
	if !opts.noRowCache {
		s.rows = newRowCache(rowCacheKeys)
	}
	if mark != nil {
		if err := s.startMarks(mark); err != nil {
			return err
		}
	}
	if opts.unlimitedBatch {
		s.batchCount, s.batchBytes = 1<<62, 1<<62
	}
	if err := s.ensureSentIndex(); err != nil {
		return err
	}
	return s.startCommitLog(opts, valueThreshold)
}

// start publishes the first snapshot and starts the store's goroutines:
// the committer, the key filter's builder, the checkpoint, the GC and the
// trimming of Badger's allocator pool.
func (s *BadgerStore) start(opts BadgerOptions) {
	s.refreshSnapshot()
	go s.commitLoop()
	s.stopTrim = s.trimAllocPool(opts)
	s.stopPages = s.releaseTablePages(opts)
	if s.keys != nil {
		go s.keyFilterLoop()
	} else {
		close(s.keysDone)
	}
	if s.mark != nil && (opts.CheckpointInterval > 0 || s.clog != nil) {
		every := opts.CheckpointInterval
		if every <= 0 {
			every = time.Second // the commit log is trimmed even so
		}
		go s.checkpointLoop(every, opts.CheckpointInterval > 0)
	} else {
		close(s.checkpointDone)
	}
	if opts.GCInterval > 0 && !opts.InMemory {
		go s.gcLoop(opts.GCInterval)
	} else {
		close(s.gcDone)
	}
}

// badgerOptions returns Badger's options for opts (defaults set).
func badgerOptions(opts BadgerOptions, log *slog.Logger) badger.Options {
	bo := badger.DefaultOptions(opts.Path).
		WithInMemory(opts.InMemory).
		WithSyncWrites(opts.NoCommitLog || opts.InMemory).
		WithLogger(badgerLogger{log}).
		WithMetricsEnabled(false).
		// The committer is the only writer: there is nothing to detect.
		WithDetectConflicts(false).
		WithMemTableSize(opts.MemtableSize).
		WithNumMemtables(opts.NumMemtables).
		WithBlockCacheSize(opts.BlockCacheSize).
		WithIndexCacheSize(opts.IndexCacheSize).
		WithValueThreshold(opts.ValueThreshold).
		// Flush memtables to level 0 without stalling writers: with
		// small memtables Badger's default of 5 level-0 tables stalls.
		WithNumLevelZeroTables(8).
		WithNumLevelZeroTablesStall(16).
		// Two compactors, and tables of BaseTableSize on every level: a
		// compaction step then touches tens of MiB of tables, not
		// hundreds (tables are memory-mapped: what a compaction reads and
		// writes is resident until the next pass over their pages).
		WithNumCompactors(2).
		// The value log holds only the (rare) big values: small files,
		// cheap to map and to sync.
		WithValueLogFileSize(64 << 20).
		WithBaseTableSize(opts.TableSize).
		WithCompression(options.Snappy)
	if opts.InMemory {
		bo.Dir, bo.ValueDir = "", ""
	}
	bo.TableSizeMultiplier = 1
	if !opts.NoCommitLog && !opts.InMemory {
		// No value in the value log, which is synced only at a checkpoint
		// (and whose older files not even then).
		bo.ValueThreshold = min(1<<20, opts.MemtableSize*15/100)
	}
	if opts.tune != nil {
		bo = opts.tune(bo)
	}
	return bo
}

// startMarks sets the store's commit count from its marker and opens the
// HWMFile.
func (s *BadgerStore) startMarks(mark *marker) error {
	s.commitSeq, s.checkpointed = mark.Commits, mark.Commits
	s.committed.Store(mark.Commits)
	h, err := openHWMFile(s.path, mark.Instance)
	if err != nil {
		return err
	}
	if err := h.write(mark.Commits, mark.At); err != nil {
		_ = h.f.Close()
		return fmt.Errorf("state: write %s: %w", HWMFile, err)
	}
	s.hwm = h
	return nil
}

// setDefaults fills the zero fields with their documented defaults.
func (opts *BadgerOptions) setDefaults() {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 8192
	}
	opts.MemtableSize = cmp.Or(max(opts.MemtableSize, 0), DefaultMemtableSize)
	opts.NumMemtables = cmp.Or(max(opts.NumMemtables, 0), DefaultNumMemtables)
	opts.BlockCacheSize = cmp.Or(max(opts.BlockCacheSize, 0), DefaultBlockCacheSize)
	opts.IndexCacheSize = cmp.Or(max(opts.IndexCacheSize, 0), DefaultIndexCacheSize)
	opts.ValueThreshold = cmp.Or(max(opts.ValueThreshold, 0), DefaultValueThreshold)
	opts.TableSize = cmp.Or(max(opts.TableSize, 0), DefaultTableSize)
	if opts.QueueSize <= 0 {
		opts.QueueSize = 4 * opts.MaxBatch
	}
	if opts.GCInterval == 0 {
		opts.GCInterval = 10 * time.Minute
	}
	if opts.CheckpointInterval == 0 {
		opts.CheckpointInterval = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MinFreeBytes == 0 {
		opts.MinFreeBytes = 512 << 20
	}
	if opts.InMemory {
		opts.MinFreeBytes = -1
	}
	if opts.diskFree == nil {
		opts.diskFree = diskFree
	}
}

// prepareDir inspects the store directory under Badger's lock, refuses
// it if damaged (unless ForceEmpty, which then quarantines a damaged
// MANIFEST and the tables) and returns what it found.
func prepareDir(opts BadgerOptions, bo badger.Options, log *slog.Logger) (dirState, error) {
	unlock, err := lockDir(opts.Path)
	if err != nil {
		return dirState{}, err
	}
	defer unlock()
	ds, err := inspectDir(opts.Path, bo)
	if err != nil {
		return ds, err
	}
	if len(ds.damage) > 0 && !opts.ForceEmpty {
		return ds, damaged(opts.Path, ds.damage)
	}
	names, err := ds.quarantineFiles(opts.Path)
	if err != nil || len(names) == 0 {
		return ds, err
	}
	q, err := quarantine(opts.Path, names, time.Now())
	if err != nil {
		return ds, err
	}
	log.Warn("state: store damaged; files moved aside (force-empty-store)", "path", opts.Path, "moved_to", q, "files", names, "problems", ds.damage)
	return ds, nil
}

// openChecked opens Badger on a directory that inspectDir and settle
// found whole (or that the operator forced, see BadgerOptions.ForceEmpty)
// and returns the store's marker (nil in memory) and the commits known
// lost. A panic of Badger's while opening is an ErrStoreDamaged.
func openChecked(bo badger.Options, opts BadgerOptions, log *slog.Logger) (db *badger.DB, mark *marker, lost uint64, err error) {
	var ds dirState
	if !opts.InMemory {
		if ds, err = prepareDir(opts, bo, log); err != nil {
			return nil, nil, 0, err
		}
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = damaged(opts.Path, []string{"Badger failed opening it: " + firstLine(fmt.Sprint(p))})
			}
		}()
		db, err = badger.Open(bo)
	}()
	if err != nil {
		if errors.Is(err, ErrStoreDamaged) {
			return nil, nil, 0, err
		}
		return nil, nil, 0, fmt.Errorf("state: open badger %q: %w", opts.Path, err)
	}
	if opts.InMemory {
		return db, nil, 0, nil
	}
	if err := replayInto(db, opts.Path, &ds, opts.ForceEmpty, log); err != nil {
		_ = db.Close()
		return nil, nil, 0, err
	}
	mark, lost, err = settle(db, opts.Path, ds, opts.ForceEmpty, log)
	if err != nil {
		_ = db.Close()
		return nil, nil, lost, err
	}
	return db, mark, lost, nil
}

// Stats returns the committer's counters.
func (s *BadgerStore) Stats() BadgerStats {
	return BadgerStats{Ops: s.ops.Load(), Commits: s.commits.Load(), Failed: s.failed.Load(), LostCommits: s.lostCommits}
}

// CommitDelay returns the commit delay in force (BadgerOptions.CommitDelay).
func (s *BadgerStore) CommitDelay() time.Duration { return s.commitDelay }

// BadgerMemory is the memory Badger was opened with (see the memory
// fields of BadgerOptions), as Badger reports it: what a configuration
// actually put in force.
type BadgerMemory struct {
	MemtableSize   int64
	NumMemtables   int
	BlockCacheSize int64
	IndexCacheSize int64
	BaseTableSize  int64
	NumCompactors  int
	Compression    string // "none", "snappy" or "zstd"
}

// Memory returns the memory settings Badger runs with.
func (s *BadgerStore) Memory() BadgerMemory {
	o := s.db.Opts()
	return BadgerMemory{
		MemtableSize: o.MemTableSize, NumMemtables: o.NumMemtables,
		BlockCacheSize: o.BlockCacheSize, IndexCacheSize: o.IndexCacheSize,
		BaseTableSize: o.BaseTableSize, NumCompactors: o.NumCompactors,
		Compression: map[options.CompressionType]string{options.None: "none", options.Snappy: "snappy", options.ZSTD: "zstd"}[o.Compression],
	}
}

// enter admits one call unless ctx is done or the store is closed; every
// successful enter is paired with exit. Close waits for the calls inside.
func (s *BadgerStore) enter(ctx context.Context) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.inflight.Add(1)
	return nil
}

func (s *BadgerStore) exit() { s.inflight.Done() }

// submit enqueues r (or gives up when ctx is done first) and waits for
// its outcome (queue operations).
func (s *BadgerStore) submit(ctx context.Context, r *request) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	select {
	case s.reqs <- r:
		s.exit()
	case <-ctx.Done():
		s.exit()
		return fmt.Errorf("state: %w", ctx.Err())
	}
	<-r.done // deliberately not ctx: see the type's comment
	return nil
}

// Get implements Store.
func (s *BadgerStore) Get(ctx context.Context, k Key) (*Record, error) {
	return s.get(ctx, k, true)
}

// GetHot implements HotReader: Get without reading the history.
func (s *BadgerStore) GetHot(ctx context.Context, k Key) (*Record, error) {
	r, err := s.get(ctx, k, false)
	if r != nil {
		r.History = nil // a record of an older version has it inline
	}
	return r, err
}

func (s *BadgerStore) get(ctx context.Context, k Key, history bool) (*Record, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	sn := s.acquire()
	defer sn.release()
	rec, _, _, err := s.loadLatest(sn, recordKey(k), history)
	if err != nil {
		return nil, err
	}
	if rec == nil || rec.Expired(s.now()) {
		return nil, ErrNotFound
	}
	return rec, nil
}

// ByMessageID implements Store.
func (s *BadgerStore) ByMessageID(ctx context.Context, upstream, id string) (*Record, error) {
	return s.byIndex(ctx, messageKey(upstream, id), true, func(r *Record) bool {
		return hasMessage(r, upstream, id)
	})
}

// byIndex reads the live record index entry ik points at, if match
// accepts it; with history, with its history (else History may hold the
// events an older version kept inline). The entry and the record are
// read from the row cache when it has both; when the record has to come
// from the snapshot (not cached, or its history is in the log), the
// entry is read from the snapshot too, so the two agree: a cached entry
// may be newer than the snapshot's record.
func (s *BadgerStore) byIndex(ctx context.Context, ik []byte, history bool, match func(*Record) bool) (*Record, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	now := s.now()
	live := func(rec *Record) bool { return rec != nil && !rec.Expired(now) && match(rec) }
	if rk, ok := s.rows.get(ik); ok {
		if rec, _, _, ok := s.cachedRecord(rk, history); ok && live(rec) {
			return rec, nil
		}
	}
	sn := s.acquire()
	defer sn.release()
	item, err := sn.txn.Get(ik)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("state: read index: %w", err)
	}
	rk, err := item.ValueCopy(nil)
	if err != nil {
		return nil, fmt.Errorf("state: read index: %w", err)
	}
	rec, _, _, err := loadRecord(sn.txn, rk, history)
	if err != nil {
		return nil, err
	}
	if !live(rec) {
		return nil, ErrNotFound
	}
	return rec, nil
}

// Scan implements Store. fn is called inside one read transaction (a
// consistent snapshot), each record with its history; Close waits for Scan
// to return.
func (s *BadgerStore) Scan(ctx context.Context, fn func(*Record) bool) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	now := s.now()
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{
			PrefetchValues: true,
			PrefetchSize:   100,
			Prefix:         []byte(prefixRecord),
		})
		defer it.Close()
		n := 0
		for it.Rewind(); it.Valid(); it.Next() {
			if n++; n%256 == 0 {
				if err := ctxErr(ctx); err != nil {
					return err
				}
			}
			var (
				rec   *Record
				histN uint32
				hot   bool
			)
			err := it.Item().Value(func(v []byte) (err error) {
				rec, histN, hot, err = decodeStored(v)
				return err
			})
			if err != nil {
				return fmt.Errorf("state: scan %q: %w", it.Item().Key(), err)
			}
			if rec.Expired(now) {
				continue
			}
			if hot && histN > uint32(len(rec.History)) {
				if rec.History, err = loadHistory(txn, it.Item().Key(), histN, rec.History); err != nil {
					return err
				}
			}
			if !fn(rec) {
				return nil
			}
		}
		return nil
	})
}

var _ StateCounter = (*BadgerStore)(nil)

// CountStates implements StateCounter: Scan's walk over the records,
// reading of each only its state and expiry (its history neither, which
// Scan loads when it is not kept with the record).
func (s *BadgerStore) CountStates(ctx context.Context, limit int) (map[SubmitState]int, bool, error) {
	if err := s.enter(ctx); err != nil {
		return nil, false, err
	}
	defer s.exit()
	now := s.now()
	counts := make(map[SubmitState]int, len(allStates))
	complete := true
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{
			// Values are read one at a time, in place where they
			// are kept in the tables (not copied ahead).
			Prefix: []byte(prefixRecord),
		})
		defer it.Close()
		n, seen := 0, 0
		for it.Rewind(); it.Valid(); it.Next() {
			if seen++; seen%256 == 0 {
				if err := ctxErr(ctx); err != nil {
					return err
				}
			}
			var (
				st  SubmitState
				exp time.Time
			)
			err := it.Item().Value(func(v []byte) error {
				var ok bool
				var err error
				if st, exp, ok, err = peekStateExpires(v); ok || err != nil {
					return err
				}
				rec, _, _, err := decodeStored(v)
				if err == nil {
					st, exp = rec.State, rec.Expires
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("state: count %q: %w", it.Item().Key(), err)
			}
			if expiredAt(exp, now) {
				continue
			}
			if n == limit {
				complete = false
				return nil
			}
			n++
			counts[st]++
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return counts, complete, nil
}

// ScanState implements Store. For Sent it visits the index of Sent
// records only (a key per such record), so its cost follows the records
// in flight, not the store's size; other states scan every record.
func (s *BadgerStore) ScanState(ctx context.Context, st SubmitState, fn func(*Record) bool) error {
	if st != Sent {
		return s.Scan(ctx, func(r *Record) bool { return r.State != st || fn(r) })
	}
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	now := s.now()
	// The entries the commit log holds and Badger not yet (heldlog.go),
	// visited after those in Badger unless found there. They are listed
	// before Badger's view is taken: an entry leaves the list only once
	// the batch that wrote it to Badger is durable, so every entry is in
	// one or the other.
	logged := map[string]bool{}
	if s.held != nil {
		for _, rk := range s.held.sentKeys() {
			logged[string(rk)] = true
		}
	}
	return s.db.View(func(txn *badger.Txn) error {
		n := 0
		visit := func(rk []byte) (bool, error) {
			if n++; n%256 == 0 {
				if err := ctxErr(ctx); err != nil {
					return false, err
				}
			}
			rec, _, _, err := loadRecord(txn, rk, true)
			if err != nil {
				return false, err
			}
			if rec == nil || rec.State != Sent || rec.Expired(now) {
				return true, nil // a stale entry (its record moved on, or expired)
			}
			return fn(rec), nil
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixSent)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			rk := recordKeyOfSent(it.Item().Key())
			delete(logged, string(rk))
			if more, err := visit(rk); err != nil || !more {
				return err
			}
		}
		for rk := range logged {
			if more, err := visit([]byte(rk)); err != nil || !more {
				return err
			}
		}
		return nil
	})
}

// Close stops accepting calls, lets every enqueued write finish (each
// gets its true outcome), stops the GC and closes Badger. Calls after
// Close return ErrClosed; closing again returns the first Close's result.
func (s *BadgerStore) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.inflight.Wait() // no call is reading or enqueuing any more
		close(s.reqs)
		<-s.committerDone
		close(s.stopKeys)
		<-s.keysDone
		s.snapMu.Lock()
		s.snap.release()
		s.snapMu.Unlock()
		close(s.stopGC)
		<-s.gcDone
		s.stopTrim()
		close(s.stopCheckpoint)
		<-s.checkpointDone
		if err := s.checkpoint(); err != nil {
			s.log.Error("state: store high-water mark not checkpointed at close", "err", err)
		}
		if s.hwm != nil {
			_ = s.hwm.f.Close()
		}
		s.saveKeyFilter()
		s.closeErr = s.closeDB()
	})
	return s.closeErr
}

// keyFilterLoop builds the filter of keys held, then builds it again
// each time it fills up, until the store closes. A build that fails
// leaves the filter as it was (lookups of keys it does not say absent
// read Badger) and is tried again after keyFilterRetry.
func (s *BadgerStore) keyFilterLoop() {
	defer close(s.keysDone)
	build := !s.keys.ready() // else loaded at open (loadKeyFilter)
	for {
		var retry <-chan time.Time
		if build {
			if _, err := s.keys.build(s.db, s.stopKeys); err != nil {
				s.log.Warn("state: the filter of keys held was not built; lookups read the store meanwhile", "err", err, "retry_in", keyFilterRetry)
				retry = time.After(keyFilterRetry)
			}
		}
		build = true
		select {
		case <-s.stopKeys:
			return
		case <-s.keys.rebuild:
		case <-retry:
		}
	}
}

// loadKeyFilter puts in use the filter of keys held that the last clean
// close saved (KeyFilterFile), when it was saved for this store as it
// opened; else the key filter's loop builds one from a scan, as before.
func (s *BadgerStore) loadKeyFilter(mark *marker) {
	if mark == nil || s.path == "" {
		return
	}
	k, err := takeKeyFilter(s.path, mark.Instance, mark.Commits)
	switch {
	case err != nil:
		s.log.Info("state: the saved filter of keys held is not used; it is built from a scan of the store", "file", KeyFilterFile, "reason", err)
	case k != nil:
		s.keys.install(k)
	}
}

// saveKeyFilter saves the filter of keys held for the next open (Close,
// once the committer has stopped). A failure costs the next open a scan.
func (s *BadgerStore) saveKeyFilter() {
	if s.keys == nil || s.mark == nil || s.path == "" {
		return
	}
	if err := saveKeyFilter(s.path, s.mark.Instance, s.commitSeq, s.keys); err != nil {
		s.log.Warn("state: the filter of keys held was not saved; the next start builds it from a scan", "file", KeyFilterFile, "err", err)
	}
}

// keyFilterRetry: how long after a failed build of the filter of keys
// held the next is tried.
const keyFilterRetry = time.Minute

func (s *BadgerStore) gcLoop(every time.Duration) {
	defer close(s.gcDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stopGC:
			return
		case <-t.C:
		}
		// Each successful run rewrote one value-log file; go on while
		// there is garbage, unless Close is waiting.
		for {
			err := s.db.RunValueLogGC(0.5)
			if err != nil {
				if !errors.Is(err, badger.ErrNoRewrite) {
					s.log.Warn("state: value log GC", "err", err)
				}
				break
			}
			select {
			case <-s.stopGC:
				return
			default:
			}
		}
	}
}

// badgerLogger routes Badger's logging to slog: errors and warnings as
// such, and its notes about data files it deletes or truncates (which
// Badger logs at info or debug level) as warnings; everything else at
// debug level.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.logf(slog.LevelError, f, a) }
func (b badgerLogger) Warningf(f string, a ...any) { b.logf(slog.LevelWarn, f, a) }
func (b badgerLogger) Infof(f string, a ...any)    { b.logf(slog.LevelDebug, f, a) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.logf(slog.LevelDebug, f, a) }

// badgerDataLoss are the phrases of Badger's messages about data files it
// deletes or truncates.
var badgerDataLoss = []string{"not referenced in MANIFEST", "truncat", "Truncat", "Deleting", "corrupt", "Corrupt"}

func (b badgerLogger) logf(level slog.Level, f string, a []any) {
	ctx := context.Background()
	msg := strings.TrimSpace(fmt.Sprintf(f, a...))
	if level < slog.LevelWarn && slices.ContainsFunc(badgerDataLoss, func(p string) bool { return strings.Contains(msg, p) }) {
		level = slog.LevelWarn
	}
	if !b.l.Enabled(ctx, level) {
		return
	}
	b.l.Log(ctx, level, "badger: "+msg)
}
