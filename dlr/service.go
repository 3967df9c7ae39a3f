package dlr

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/logx"
	"github.com/smppproxy/smppproxy/msgid"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/state"
)

// Defaults applied to zero fields.
const (
	DefaultRetention          = 72 * time.Hour
	DefaultRedelivery         = 10 * time.Second
	DefaultDeliverWindow      = 10
	DefaultReconcileWindow    = 10 * time.Minute
	DefaultUnmatchedRetention = 72 * time.Hour
)

// Queue entry kinds (state.QueueEntry.Kind).
const (
	KindReceipt   = "receipt"
	KindMO        = "mo"
	KindUnmatched = "unmatched"
)

// Config configures a Service. Zero values take the documented defaults.
type Config struct {
	// Instance names this process among those sharing the queues (a
	// shared store): it claims an entry before delivering it.
	Instance string
	// Store holds the records; Queue the queues (nil: Store must
	// implement state.Queue, as BadgerStore and MemStore do).
	Store state.Store
	Queue state.Queue
	// Accounts by system_id, Upstreams by name.
	Accounts  map[string]Account
	Upstreams map[string]Upstream
	// IDs reads the upstreams' message ids and issues none here (nil: every
	// id as-is): the one the dedup engine uses (dedup.Config.IDs).
	IDs *msgid.IDs
	// MORoutes route MO by the longest matching destination prefix; MO
	// that matches none goes to DefaultAccount ("" = refused).
	MORoutes       []MORoute
	DefaultAccount string
	// UnmatchedRetention: how long an unmatched receipt is kept (72h).
	UnmatchedRetention time.Duration
	// UnmatchedMax bounds each upstream's unmatched receipts: past it the
	// oldest are deleted (DefaultUnmatchedMax, 100000).
	UnmatchedMax int
	// ReconcileWindow: an unmatched receipt may settle an unknown record
	// created within this distance of the receipt's submit date (10m).
	// The submit date has no time zone: UTC and the local zone are both
	// tried. A receipt without a submit date settles no record by its
	// addresses (only by an echoed key).
	ReconcileWindow time.Duration
	// DeliverWindow: deliver_sm outstanding per ESME session (10) of an
	// account without a Window of its own. They are written in queue
	// order (see dispatcher.start).
	DeliverWindow int
	// BindSettle: a newly bound session gets its first deliver_sm no
	// earlier than this long after its bind (default 0: the server
	// announces a session only once its bind_resp is queued, so nothing can
	// overtake it).
	BindSettle time.Duration
	Logger     *slog.Logger
	// LogKey is how a stored record key appears in log lines (nil = as
	// stored). The proxy replaces the fingerprint a fingerprint-derived key
	// embeds by its tag (dedup.TagKey), so no log line carries it.
	LogKey func(stored string) string
	// Registerer for the metrics; nil: not registered.
	Registerer prometheus.Registerer
	Now        func() time.Time

	// Receivers lists the ESME sessions that receive (nil: none, so
	// nothing is delivered); ServerReceivers adapts an smppserver.Server.
	Receivers Receivers
	// Resolver settles an unknown record named by a kept receipt (nil:
	// kept receipts are matched by id only); *dedup.Engine implements it.
	Resolver Resolver
	// NotUnknown reports whether an error of Resolver says the record is
	// no longer unknown (it was settled otherwise meanwhile; the next try
	// of the receipt sees it): errors.Is(err, dedup.ErrNotUnknown). nil:
	// no error means that.
	NotUnknown func(error) bool
	// Keys says how the engine keys a record by its key TLV, for echo_tlv.
	Keys Keys
}

// Keys tells dlr how record keys are made from a key TLV without dlr
// knowing their format (it is the dedup engine's).
type Keys struct {
	// OfTLV returns the record key of a submit whose key TLV holds v
	// (dedup.KeyOfTLV). nil: echo_tlv is not read.
	OfTLV func(v []byte) string
	// FromTLV reports whether a record key was made by OfTLV. nil: none
	// was.
	FromTLV func(key string) bool
}

// Account is the receipt policy of one ESME account.
type Account struct {
	// Retention is dlr_retention (72h); Redelivery is dlr_redelivery (10s).
	Retention, Redelivery time.Duration
	// Window is dlr_window: deliver_sm awaiting their response per
	// receiving session (0: Config.DeliverWindow).
	Window int
	// Route lists the account's upstreams (echo_tlv candidates).
	Route []string
}

// Upstream is the receipt configuration of one upstream.
type Upstream struct {
	// EchoTLV is a TLV the upstream echoes in receipts carrying the
	// idempotency key of the submit (0 = none).
	EchoTLV uint16
	// ResponseTimeout is the upstream's response_timeout: how long a
	// record may stay `sent` after its submit was written. A kept receipt
	// settles an unknown record by its addresses or echoed key only once
	// it has been kept longer than this (plus settleMargin): until then
	// the receipt may belong to a message whose submit_sm_resp is still on
	// its way, and only its own id may match it. Zero: settleMargin only.
	ResponseTimeout time.Duration
}

// MORoute sends MO whose destination starts with Prefix to Account.
type MORoute struct{ Prefix, Account string }

// Resolver settles an unknown record named by a receipt; *dedup.Engine
// implements it.
type Resolver interface {
	ResolveFromReceipt(ctx context.Context, k state.Key, upstream, messageID, why string) (*state.Record, error)
}

// Service receives receipts and MO from the upstreams, queues them
// durably and delivers them to the ESMEs. Create it with New, run it with
// Start, stop it with Close.
type Service struct {
	cfg Config
	ids *msgid.IDs
	q   state.Queue
	log *slog.Logger
	now func() time.Time
	m   *metrics
	// warn rate-limits the per-PDU lines about what an upstream delivers
	// (by upstream and kind).
	warn *logx.Limiter

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// pol is the accounts and MO routes in force (Reconfigure replaces it).
	pol atomic.Pointer[policy]
	// ups is the upstreams in force (Config.Upstreams, then Reconfigure's).
	ups atomic.Pointer[map[string]Upstream]

	mu       sync.Mutex
	accounts map[string]*dispatcher
	started  bool

	rec   *reconciler
	bound *unmatchedBound
}

// New validates cfg and returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("dlr: Config.Store is required")
	}
	q := cfg.Queue
	if q == nil {
		var ok bool
		if q, ok = cfg.Store.(state.Queue); !ok {
			return nil, fmt.Errorf("dlr: store %T has no queue (state.Queue)", cfg.Store)
		}
	}
	if cfg.UnmatchedRetention <= 0 {
		cfg.UnmatchedRetention = DefaultUnmatchedRetention
	}
	if cfg.UnmatchedMax <= 0 {
		cfg.UnmatchedMax = DefaultUnmatchedMax
	}
	if cfg.ReconcileWindow <= 0 {
		cfg.ReconcileWindow = DefaultReconcileWindow
	}
	if cfg.DeliverWindow <= 0 {
		cfg.DeliverWindow = DefaultDeliverWindow
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.IDs == nil {
		cfg.IDs, _ = msgid.New(nil, nil)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pol, err := newPolicy(cfg.Accounts, cfg.MORoutes, cfg.DefaultAccount)
	if err != nil {
		return nil, err
	}
	cfg.Accounts, cfg.MORoutes, cfg.DefaultAccount = nil, nil, "" // read from pol
	if cfg.NotUnknown == nil {
		cfg.NotUnknown = func(error) bool { return false }
	}
	if cfg.Keys.FromTLV == nil {
		cfg.Keys.FromTLV = func(string) bool { return false }
	}
	if cfg.LogKey == nil {
		cfg.LogKey = func(k string) string { return k }
	}
	s := &Service{
		cfg: cfg, q: q, log: cfg.Logger, now: cfg.Now, m: newMetrics(cfg.Registerer),
		warn:     logx.NewLimiter(smppclient.WarnInterval, 256, cfg.Now),
		ids:      cfg.IDs,
		accounts: map[string]*dispatcher{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.pol.Store(pol)
	s.SetUpstreams(cfg.Upstreams)
	for name := range pol.accounts {
		s.accounts[name] = newDispatcher(s, name)
	}
	s.rec = newReconciler(s)
	s.bound = newUnmatchedBound(cfg.UnmatchedMax, q, cfg.Logger, s.m, cfg.Registerer, cfg.Now)
	return s, nil
}

// receivers returns the bound receiving sessions of account.
func (s *Service) receivers(account string) []Receiver {
	if s.cfg.Receivers == nil {
		return nil
	}
	return s.cfg.Receivers.Receivers(account)
}

// Start loads the queue depths and starts the dispatchers and the
// reconciler. Calling it twice does nothing.
func (s *Service) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	if n, ok := s.q.(state.Notifier); ok {
		// Another instance queued for an account this one may have
		// receivers of: deliver now rather than at the next poll.
		n.Subscribe(func(queue string) {
			if acct, ok := strings.CutPrefix(queue, accountPrefix); ok {
				s.kick(acct)
			}
		})
	}
	s.refreshDepths()
	for _, d := range s.accounts {
		s.startLocked(d)
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.rec.run()
	}()
	go func() {
		defer s.wg.Done()
		s.bound.run(s.ctx)
	}()
}

// startLocked runs d's delivery loop until Close (s.mu held).
func (s *Service) startLocked(d *dispatcher) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		d.run()
	}()
}

// policy is the per-account configuration in force.
type policy struct {
	accounts map[string]Account
	mo       []MORoute // longest prefix first
	def      string    // the account of MO no route matches ("" = refused)
}

// newPolicy applies the defaults to accounts and checks that every MO
// route names one of them.
func newPolicy(accounts map[string]Account, mo []MORoute, def string) (*policy, error) {
	p := &policy{accounts: make(map[string]Account, len(accounts)), mo: append([]MORoute(nil), mo...), def: def}
	for name, a := range accounts {
		if a.Retention <= 0 {
			a.Retention = DefaultRetention
		}
		if a.Redelivery <= 0 {
			a.Redelivery = DefaultRedelivery
		}
		p.accounts[name] = a
	}
	for _, r := range p.mo {
		if _, ok := p.accounts[r.Account]; !ok {
			return nil, fmt.Errorf("dlr: mo route %q: no account %q", r.Prefix, r.Account)
		}
	}
	sort.SliceStable(p.mo, func(i, j int) bool { return len(p.mo[i].Prefix) > len(p.mo[j].Prefix) })
	return p, nil
}

// Reconfigure puts accounts, MO routes and the default MO account in
// force (a configuration reload): a new account gets its delivery loop (started at once if the
// service runs), changed retention and redelivery apply to what is
// queued from now on. The queue of an account no longer configured is
// kept, undelivered, until its entries expire or the account returns.
func (s *Service) Reconfigure(accounts map[string]Account, mo []MORoute, defaultAccount string, upstreams map[string]Upstream) error {
	pol, err := newPolicy(accounts, mo, defaultAccount)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pol.Store(pol)
	s.SetUpstreams(upstreams)
	for name := range pol.accounts {
		if s.accounts[name] != nil {
			continue
		}
		d := newDispatcher(s, name)
		s.accounts[name] = d
		if s.started {
			s.startLocked(d)
		}
	}
	return nil
}

// upstreams is the upstreams in force, by name. Not to be modified.
func (s *Service) upstreams() map[string]Upstream { return *s.ups.Load() }

// Upstreams returns a copy of the upstreams in force.
func (s *Service) Upstreams() map[string]Upstream { return maps.Clone(s.upstreams()) }

// SetUpstreams puts upstreams in force (as Reconfigure does).
func (s *Service) SetUpstreams(upstreams map[string]Upstream) {
	ups := maps.Clone(upstreams)
	s.ups.Store(&ups)
}

// Close stops delivering (deliver_sm in flight are abandoned: they stay
// queued) and waits for every goroutine. Call it before closing the store.
func (s *Service) Close() {
	s.cancel()
	s.wg.Wait()
}

// refreshDepths sets the queue depth gauges from the store.
func (s *Service) refreshDepths() {
	depths, err := s.q.Depths(s.ctx)
	if err != nil {
		s.log.Warn("dlr: reading queue depths", "err", err)
		return
	}
	accounts := s.pol.Load().accounts
	for name := range accounts {
		s.m.depth.WithLabelValues(name).Set(float64(depths[accountQueue(name)]))
	}
	var unmatched []string
	kept := map[string]int{}
	for q, n := range depths {
		if up, ok := strings.CutPrefix(q, unmatchedPrefix); ok && n > 0 {
			unmatched = append(unmatched, up)
			kept[up] = n
		}
		if acct, ok := strings.CutPrefix(q, accountPrefix); ok && n > 0 {
			if _, configured := accounts[acct]; configured {
				continue
			}
			s.log.Warn("dlr: queued receipts/MO of an account that is not configured", "account", acct, "entries", n)
		}
	}
	s.rec.noteKnown(unmatched...)
	s.bound.reset(kept)
}

const (
	accountPrefix   = "esme/"
	unmatchedPrefix = "unmatched/"
)

// accountQueue is the name of an account's delivery queue.
func accountQueue(account string) string { return accountPrefix + account }

// unmatchedQueue is the name of an upstream's unmatched receipts queue.
func unmatchedQueue(upstream string) string { return unmatchedPrefix + upstream }

func (s *Service) account(name string) Account {
	if a, ok := s.pol.Load().accounts[name]; ok {
		return a
	}
	return Account{Retention: DefaultRetention, Redelivery: DefaultRedelivery}
}

// kick wakes the dispatcher of account.
func (s *Service) kick(account string) {
	s.mu.Lock()
	d := s.accounts[account]
	s.mu.Unlock()
	if d != nil {
		d.wake()
	}
}

// warnPDU logs a line about one PDU an upstream delivered (malformed,
// unmatched, …) at most once per smppclient.WarnInterval per upstream and
// kind; the others are only counted, and the next line logged says how
// many were held back ("suppressed"). The outcome metrics count them all.
func (s *Service) warnPDU(log *slog.Logger, lvl slog.Level, upstream, kind, msg string, args ...any) {
	s.warn.Log(log, lvl, upstream+"\x00"+kind, msg, args...)
}

// OnDeliver is smppclient.Config.OnDeliver: it handles one deliver_sm or
// data_sm from an upstream and returns the status of the upstream's
// deliver_sm_resp, which is 0 only once the PDU is durably queued (or was
// queued before: a duplicate receipt).
func (s *Service) OnDeliver(ctx context.Context, d smppclient.Delivery) smpp.Status {
	ctx = context.WithoutCancel(ctx) // the answer must be the truth
	m, err := parseMessage(d.Frame)
	if err != nil {
		s.m.received("", d.Upstream, OutMalformed)
		s.warnPDU(s.log, slog.LevelWarn, d.Upstream, "malformed", "dlr: malformed deliver_sm from upstream", "upstream", d.Upstream, "session", d.Session, "err", err)
		var fe *smpp.FieldError
		if errors.As(err, &fe) {
			return fe.Status
		}
		return smpp.StatusInvCmdID
	}
	if !m.isReceipt() {
		return s.intakeMO(ctx, d, m)
	}
	return s.intakeReceipt(ctx, d.Upstream, m)
}

func (s *Service) intakeReceipt(ctx context.Context, upstream string, m *message) smpp.Status {
	r := readReceipt(m)
	// The receipt's logger is made only for a line to log (it is not free).
	log := func() *slog.Logger {
		return s.log.With("upstream", upstream, "receipt_id", logID(r.id), "stat", r.stat)
	}
	rec, err := s.match(ctx, upstream, r)
	if errors.Is(err, state.ErrNotFound) || errors.Is(err, errIDConflict) {
		if errors.Is(err, errIDConflict) {
			s.warnPDU(log(), slog.LevelWarn, upstream, "id_conflict", "dlr: receipt's receipted_message_id and text id name different records; kept unmatched", "text_id", r.text.ID)
		}
		out, err := s.keepUnmatched(ctx, upstream, r)
		if err != nil {
			s.m.received("", upstream, OutStoreError)
			s.warnPDU(log(), slog.LevelError, upstream, "store_refused_unmatched", "dlr: store refused an unmatched receipt; upstream answered ESME_RSYSERR", "err", err)
			return smpp.StatusSysErr
		}
		s.m.received("", upstream, out)
		s.warnPDU(log(), slog.LevelInfo, upstream, "unmatched", "dlr: receipt matches no record; kept", "outcome", out)
		return smpp.StatusOK
	}
	if err == nil {
		var out string
		out, err = s.route(ctx, upstream, rec, r)
		if err == nil {
			s.m.received(rec.Key.Account, upstream, out)
			if s.log.Enabled(ctx, slog.LevelDebug) {
				log().Debug("dlr: receipt", "outcome", out, "account", rec.Key.Account, "key", s.cfg.LogKey(rec.Key.Key), "segment", rec.Key.Segment, "message_id", rec.ClientMessageID())
			}
			return smpp.StatusOK
		}
	}
	account := ""
	if rec != nil {
		account = rec.Key.Account
	}
	s.m.received(account, upstream, OutStoreError)
	s.warnPDU(log(), slog.LevelError, upstream, "store_refused", "dlr: store refused a receipt; upstream answered ESME_RSYSERR", "err", err)
	return smpp.StatusSysErr
}

// errIDConflict: the receipt's receipted_message_id and the id of its
// text name two different records (or disagree in a way no id format
// explains). Such a receipt is kept unmatched and settles no unknown
// record either. It is not state.ErrNotFound: a conflict is not "no
// record".
var errIDConflict = errors.New("dlr: receipted_message_id and the text's id name different records")

// match finds the record a receipt names by its ids. receipted_message_id
// is read in receipt_id_format, else (SMSCs often write it as in their
// submit_sm_resp) in resp_id_format, else the text's id is used. When the
// text's id names a record, the TLV must name the same one under one of
// its two readings (that reading is then the one meant); otherwise the
// receipt is errIDConflict.
func (s *Service) match(ctx context.Context, upstream string, r *receipt) (*state.Record, error) {
	lookup := func(id string) (*state.Record, error) {
		if id == "" {
			return nil, nil
		}
		rec, err := s.byMessageID(ctx, upstream, id)
		if errors.Is(err, state.ErrNotFound) {
			return nil, nil
		}
		return rec, err
	}
	var asReceipt, textID string
	var byTLV, byText *state.Record // the TLV read in receipt_id_format; the text's id
	var err error
	if r.tlv != "" {
		asReceipt = s.ids.NormalizeReceiptID(upstream, r.tlv)
		if byTLV, err = lookup(asReceipt); err != nil {
			return nil, err
		}
	}
	if r.text.ID != "" {
		textID = s.ids.NormalizeReceiptID(upstream, r.text.ID)
		if textID == asReceipt {
			byText = byTLV
		} else if byText, err = lookup(textID); err != nil {
			return nil, err
		}
	}
	// byResp: the TLV read in resp_id_format, when that reading differs
	// and is needed.
	byResp := func() (*state.Record, error) {
		if r.tlv == "" {
			return nil, nil
		}
		id := s.ids.NormalizeID(upstream, r.tlv)
		if id == asReceipt {
			return nil, nil
		}
		if id == textID {
			return byText, nil
		}
		return lookup(id)
	}
	switch {
	case byText != nil:
		if byTLV != nil && byTLV.Key == byText.Key {
			return byText, nil
		}
		alt, err := byResp()
		if err != nil {
			return nil, err
		}
		if alt != nil && alt.Key == byText.Key || byTLV == nil && alt == nil {
			return byText, nil
		}
		return nil, errIDConflict
	case byTLV != nil:
		// The TLV alone names a record (the text has no id, or
		// one that names none): its other reading must not name
		// another (the receipt could be another customer's).
		alt, err := byResp()
		if err != nil {
			return nil, err
		}
		if alt != nil && alt.Key != byTLV.Key {
			return nil, errIDConflict
		}
		return byTLV, nil
	}
	alt, err := byResp()
	if err != nil {
		return nil, err
	}
	if alt != nil {
		return alt, nil
	}
	return nil, state.ErrNotFound
}

// hotStore is implemented by a store that can find a record by message id
// without reading its history and append to a record's history without
// reading it (state.BadgerStore): the intake of a receipt needs neither.
type hotStore interface {
	ByMessageIDHot(ctx context.Context, upstream, id string) (*state.Record, error)
	AppendHot(ctx context.Context, k state.Key, fn func(*state.Record) error) error
}

// byMessageID is Store.ByMessageID, without the record's history when the
// store can.
func (s *Service) byMessageID(ctx context.Context, upstream, id string) (*state.Record, error) {
	if h, ok := s.cfg.Store.(hotStore); ok {
		return h.ByMessageIDHot(ctx, upstream, id)
	}
	return s.cfg.Store.ByMessageID(ctx, upstream, id)
}

// matchIDs returns the normalised ids receipt r may name its record by
// (see match).
func (s *Service) matchIDs(upstream string, r *receipt) map[string]bool {
	ids := map[string]bool{}
	if r.tlv != "" {
		ids[s.ids.NormalizeReceiptID(upstream, r.tlv)] = true
		ids[s.ids.NormalizeID(upstream, r.tlv)] = true
	}
	if r.text.ID != "" {
		ids[s.ids.NormalizeReceiptID(upstream, r.text.ID)] = true
	}
	return ids
}

// respIDOf returns the id receipt r names its message by, written as the
// upstream writes it in a submit_sm_resp, for settling an unknown record
// with it. ok is false when the TLV and the text's id disagree in a way
// no format explains (then nothing is settled by this receipt).
func (s *Service) respIDOf(upstream string, r *receipt) (string, bool) {
	id, ok := s.respIDOfAny(upstream, r)
	if len(id) > maxSettleID {
		return "", false // no SMSC gives ids that long: nothing to settle with
	}
	return id, ok
}

// maxSettleID is the longest id a receipt settles a record with (the
// longest the upstream client takes in a response).
const maxSettleID = 255

// respIDOfAny is respIDOf without the bound on the id's length.
func (s *Service) respIDOfAny(upstream string, r *receipt) (string, bool) {
	tlv, text := r.tlv, r.text.ID
	switch {
	case tlv == "" && text == "":
		return "", false
	case tlv == "":
		return s.ids.RespIDFromReceipt(upstream, text), true
	case text == "":
		if s.ids.TwoReadings(upstream, tlv) {
			return "", false // which message it names depends on how it is written
		}
		return s.ids.RespIDFromReceipt(upstream, tlv), true
	case s.ids.NormalizeReceiptID(upstream, tlv) == s.ids.NormalizeReceiptID(upstream, text):
		return s.ids.RespIDFromReceipt(upstream, tlv), true
	case s.ids.NormalizeID(upstream, tlv) == s.ids.NormalizeReceiptID(upstream, text):
		return tlv, true // the TLV is written as in the submit_sm_resp
	}
	return "", false
}

// dedupKey identifies one receipt of one message for duplicate detection:
// its upstream, id and state, and msg, what tells apart two messages the
// upstream gave one id (a counter that restarted, a small id space): the
// matched record (recordMark), or an unmatched receipt's submit date.
func dedupKey(upstream, matchID, msg, stateKey string) string {
	k := upstream + "\x00" + matchID + "\x00" + msg + "\x00" + stateKey
	if len(k) > maxDedupKey {
		// A hostile or broken upstream's very long id: a key that long would
		// be over the store's limit (and refused at every resend); its hash
		// tells the same receipt again as well.
		h := sha256.Sum256([]byte(k))
		return "h" + hex.EncodeToString(h[:])
	}
	return k
}

// maxDedupKey: longer dedup keys are stored as their hash.
const maxDedupKey = 512

// logID is a receipt id as logged: cut after 64 octets (an upstream may
// send ids of any length).
func logID(id string) string {
	if len(id) <= 64 {
		return id
	}
	return fmt.Sprintf("%s…(%d octets)", strings.ToValidUTF8(id[:64], ""), len(id))
}

// recordMark names rec among the records one upstream id may have named:
// a hash of its account, segment and when it was created, short. Not of
// its key: a record renewed past its fingerprint window is archived under
// another key, and the receipts matched before and after must agree.
func recordMark(rec *state.Record) string {
	b := make([]byte, 0, len(rec.Key.Account)+len(rec.Key.Segment)+10)
	b = append(append(b, rec.Key.Account...), 0)
	b = append(append(b, rec.Key.Segment...), 0)
	h := sha256.Sum256(binary.BigEndian.AppendUint64(b, uint64(rec.Created.UnixNano())))
	return "r" + hex.EncodeToString(h[:12])
}

// route queues a matched receipt for the record's account, rewritten to
// the id the ESME knows, and records the delivery state.
func (s *Service) route(ctx context.Context, upstream string, rec *state.Record, r *receipt) (string, error) {
	acct := rec.Key.Account
	clientID := rec.ClientMessageID()
	now := s.now()
	body := r.rewrite(clientID)
	e := &state.QueueEntry{
		Queue: accountQueue(acct), DedupKey: dedupKey(upstream, rec.MatchID(), recordMark(rec), r.stateKey(body)),
		Kind: KindReceipt, Upstream: upstream, MessageID: clientID, Stat: r.stat,
		Command: r.m.cmd, Body: body, Enqueued: now, Expires: now.Add(s.account(acct).Retention),
	}
	mark := deliveryMark(upstream, r, now, rec)
	var dup, marked bool
	var err error
	if ea, ok := s.q.(enqueueAppender); ok && any(s.q) == any(s.cfg.Store) {
		// One durable write for both (the record's change only with the
		// entry): the intake's one wait for a sync.
		_, dup, marked, err = ea.EnqueueAppend(ctx, e, rec.Key, mark)
	} else {
		_, dup, err = s.q.Enqueue(ctx, e)
	}
	if err != nil {
		return "", err
	}
	if dup {
		return OutDuplicate, nil
	}
	s.m.depth.WithLabelValues(acct).Inc()
	if !marked {
		s.markDelivery(ctx, rec.Key, mark)
	}
	s.kick(acct)
	if s.hasReceiver(acct) {
		return OutRouted, nil
	}
	return OutQueued, nil
}

// enqueueAppender is implemented by a store that enqueues an entry and
// appends to a record's history in one write (state.BadgerStore).
type enqueueAppender interface {
	EnqueueAppend(ctx context.Context, e *state.QueueEntry, k state.Key, fn func(*state.Record) error) (seq uint64, dup, appended bool, err error)
}

// deliveryMark is the change receipt r makes to its record, matched (as
// read when the receipt was matched): its delivery state (a final state is
// not overwritten by a late intermediate one) and an event. It reads no
// history. The key may hold another record by the time it is applied (the
// matched one passed its dedup window and was renewed): that one is left
// alone (state.ErrAbort), the receipt being queued all the same.
func deliveryMark(upstream string, r *receipt, now time.Time, matched *state.Record) func(*state.Record) error {
	return func(rec *state.Record) error {
		if !rec.Created.Equal(matched.Created) {
			return state.ErrAbort
		}
		if r.state != "" && !(rec.Delivery.Final() && !r.state.Final()) {
			rec.Delivery, rec.DeliveryAt = r.state, now
		}
		rec.Updated = now
		rec.History = append(rec.History, state.Event{At: now, State: rec.State, MessageID: rec.MessageID,
			Note: "receipt from " + upstream + ": " + orDash(string(r.state)) + " (stat " + orDash(r.stat) + ")"})
		return nil
	}
}

// markDelivery records on the record what the receipt says (mark; best
// effort: the receipt is already queued).
func (s *Service) markDelivery(ctx context.Context, k state.Key, mark func(*state.Record) error) {
	update := func(ctx context.Context, k state.Key, fn func(*state.Record) error) error {
		_, err := s.cfg.Store.Update(ctx, k, fn)
		return err
	}
	if h, ok := s.cfg.Store.(hotStore); ok {
		update = h.AppendHot // mark reads no history: it appends one event
	}
	if err := update(ctx, k, mark); err != nil && !errors.Is(err, state.ErrAbort) {
		s.log.Warn("dlr: delivery state not recorded", "account", k.Account, "key", s.cfg.LogKey(k.Key), "segment", k.Segment, "err", err)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// keepUnmatched queues a receipt that matches no record in its
// upstream's unmatched queue.
func (s *Service) keepUnmatched(ctx context.Context, upstream string, r *receipt) (string, error) {
	now := s.now()
	body := r.m.body()
	e := &state.QueueEntry{
		Queue: unmatchedQueue(upstream), DedupKey: dedupKey(upstream, s.ids.NormalizeReceiptID(upstream, r.id), "s"+r.text.SubmitDate, r.stateKey(body)),
		Kind: KindUnmatched, Upstream: upstream, MessageID: r.id, Stat: r.stat,
		Command: r.m.cmd, Body: body, Enqueued: now, Expires: now.Add(s.cfg.UnmatchedRetention),
	}
	if r.id == "" {
		e.DedupKey = "" // nothing to tell two of them apart by
	}
	_, dup, err := s.q.Enqueue(ctx, e)
	if err != nil {
		return "", err
	}
	if dup {
		return OutDuplicate, nil
	}
	s.bound.added(upstream)
	s.rec.note(upstream)
	return OutUnmatched, nil
}

// intakeMO queues an MO message for the account mo_routes names.
func (s *Service) intakeMO(ctx context.Context, d smppclient.Delivery, m *message) smpp.Status {
	acct := s.moAccount(string(m.dst))
	if acct == "" {
		s.m.received("", d.Upstream, OutMOUnroutable)
		s.warnPDU(s.log, slog.LevelWarn, d.Upstream, "mo_unroutable", "dlr: MO matches no mo_routes prefix and there is no default_account; refused", "upstream", d.Upstream, "status", smpp.StatusInvDstAdr.String())
		return smpp.StatusInvDstAdr
	}
	now := s.now()
	e := &state.QueueEntry{
		Queue: accountQueue(acct), Kind: KindMO, Upstream: d.Upstream, Command: m.cmd,
		Body: append([]byte(nil), d.Frame[smpp.HeaderLen:]...), Enqueued: now, Expires: now.Add(s.account(acct).Retention),
	}
	if _, _, err := s.q.Enqueue(ctx, e); err != nil {
		s.m.received(acct, d.Upstream, OutStoreError)
		s.warnPDU(s.log, slog.LevelError, d.Upstream, "store_refused_mo", "dlr: store refused an MO; upstream answered ESME_RSYSERR", "upstream", d.Upstream, "account", acct, "err", err)
		return smpp.StatusSysErr
	}
	s.m.depth.WithLabelValues(acct).Inc()
	s.m.received(acct, d.Upstream, OutMO)
	s.log.Debug("dlr: MO queued", "upstream", d.Upstream, "account", acct)
	s.kick(acct)
	return smpp.StatusOK
}

// moAccount routes an MO by destination: the longest mo_routes prefix,
// else the default account.
func (s *Service) moAccount(dst string) string {
	p := s.pol.Load() // one policy for the whole decision, though a reload swaps it
	for _, r := range p.mo {
		if strings.HasPrefix(dst, r.Prefix) {
			return r.Account
		}
	}
	return p.def
}
