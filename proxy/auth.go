package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/clock"
	"github.com/smppproxy/smppproxy/logx"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppserver"
	"github.com/smppproxy/smppproxy/state"
)

// Bind hardening. The password checks of a source address, and those of a
// system_id, are spaced while that address or system_id has recent
// failures: a bind waits before its check (whatever its password) until
// the address's and the system_id's next check may start, and each check
// moves that time on by a delay that doubles per recent failure and per
// check of the same key still running, from bindBackoffBase up to
// bindBackoffMax. A bind that would wait longer than bindBackoffMax is
// refused without a check. So, once a source or a system_id has failed,
// the guesses it gets are bounded per second however many connections
// carry them (a delay after the answer to a failure, as before, cost an
// attacker nothing: it hung up and tried again on another connection).
// A successful bind
// forgets its system_id's failures, not its address's (or an attacker
// with an account of its own could clear its address's count between
// guesses); a count is forgotten after bindBackoffQuiet without a failure.
// Binds of a key without recent failures are not spaced up to bindBurst
// checks running at once: a client opening its binds at once is checked
// at once, within the bound of concurrent bcrypt checks.
// Refusals are logged once per source address per bindLogInterval, with
// the count of the lines held back.
const (
	bindBackoffBase  = 100 * time.Millisecond
	bindBackoffMax   = 5 * time.Second
	bindBackoffQuiet = time.Minute
	bindBackoffKeys  = 10000
	bindLogInterval  = time.Minute
)

// accountAuth authenticates ESME binds against the configured accounts:
// password (constant-time) or bcrypt hash, allowed networks. max_binds is
// enforced by the server from the Principal.
//
// An unknown system_id is checked against a dummy hash of the highest
// bcrypt cost configured (a constant-time compare when no account has a
// hash), so that it costs what a wrong password costs. At most
// 2×GOMAXPROCS bcrypt checks run at once; a bind that cannot start one
// before its context ends (the server's bind_timeout) is refused.
type accountAuth struct {
	set      atomic.Pointer[accountSet] // the accounts in force (setAccounts)
	disabled sync.Map                   // system_id → struct{}: binds refused (App.DisableAccount)
	log      *slog.Logger
	backoff  *bindBackoff
	logLimit *logx.Limiter
	checks   chan struct{} // semaphore of the bcrypt checks

	// pick is the key that chooses the dummy hash an unknown system_id is
	// checked against (dummyFor): derived from the store's fingerprint
	// secret (usePickKey), so that a name gets the same one after a restart
	// and on every instance sharing the store; random until then.
	pick []byte

	// compare and sleep are bcrypt.CompareHashAndPassword and a wait that
	// ends with ctx; tests replace them.
	compare func(hash, pw []byte) error
	sleep   func(ctx context.Context, d time.Duration)
}

// newAccountAuth builds the authenticator; now is the clock of the
// back-off and of the log limiter (nil = time.Now).
func newAccountAuth(log *slog.Logger, accts []config.Account, now func() time.Time) *accountAuth {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	a := &accountAuth{
		log:      log,
		backoff:  newBindBackoff(now),
		logLimit: logx.NewLimiter(bindLogInterval, bindBackoffKeys, now),
		checks:   make(chan struct{}, bcryptChecks()),
		compare:  bcrypt.CompareHashAndPassword,
		sleep:    clock.Sleep,
		pick:     []byte(rand.Text()),
	}
	a.setAccounts(accts)
	return a
}

// bcryptChecks is how many bcrypt checks may run at once: two per CPU the
// runtime may use, the lesser of GOMAXPROCS and the host's CPUs (serve
// may run more processors than CPUs, see config.MaxProcsOrDefault: with
// 8 processors on 2 CPUs, 16 checks would leave a submit no processor).
func bcryptChecks() int {
	return 2 * min(runtime.GOMAXPROCS(0), runtime.NumCPU())
}

// accountSet is the accounts a bind is checked against.
type accountSet struct {
	byID map[string]*config.Account
	// costs are the bcrypt costs of the accounts' hashes, sorted, and
	// dummies a hash of no password at each (none when no account has a
	// hash): what an unknown system_id is checked against (dummyFor). Cost
	// 0 stands for the plain passwords, when some accounts have one beside
	// hashed ones: its dummy is nil (checked as a plain password is).
	costs   []int
	dummies map[int][]byte
}

// setAccounts puts accts in force for the binds that follow (sessions
// already bound keep their account); a reload calls it.
func (a *accountAuth) setAccounts(accts []config.Account) {
	set := &accountSet{byID: make(map[string]*config.Account, len(accts)), dummies: map[int][]byte{}}
	var old map[int][]byte
	if o := a.set.Load(); o != nil {
		old = o.dummies
	}
	plain := false
	for i := range accts {
		acc := accts[i]
		set.byID[acc.SystemID] = &acc
		plain = plain || acc.PasswordHash == ""
		c, err := bcrypt.Cost([]byte(acc.PasswordHash))
		if acc.PasswordHash == "" || err != nil || set.dummies[c] != nil {
			continue
		}
		if set.dummies[c] = old[c]; set.dummies[c] == nil {
			// The password is random so that no bind can match it.
			set.dummies[c], _ = bcrypt.GenerateFromPassword([]byte(rand.Text()), c)
		}
		set.costs = append(set.costs, c)
	}
	if plain && len(set.costs) > 0 {
		set.costs = append(set.costs, 0) // dummies[0] is nil
	}
	slices.Sort(set.costs)
	a.set.Store(set)
}

// dummyFor is the hash an unknown system_id id is checked against: one of
// the configured costs' dummies, the same for id every time, chosen by a
// keyed hash of id so that every cost serves some ids. A wrong password
// for an account then costs what some unknown system_ids cost, whatever
// the account's cost (with only the highest cost, the accounts of a lower
// one answered faster than any unknown id: their existence showed), and a
// wrong plain password what others cost (nil: a plain comparison). nil
// when no account has a hash.
//
// The choice is a rendezvous: each cost scores a keyed hash of (id, cost)
// and the highest wins, so a reload that adds a cost moves only the names
// that go to it (a choice modulo the number of costs moved most names,
// and a name that changed class between two costs showed it was unknown).
func (a *accountAuth) dummyFor(set *accountSet, id string) []byte {
	if len(set.costs) == 0 {
		return nil
	}
	best, bestScore := set.costs[0], uint64(0)
	for i, c := range set.costs {
		m := hmac.New(sha256.New, a.pick)
		m.Write([]byte(id))
		m.Write([]byte{0, byte(c)})
		if score := binary.BigEndian.Uint64(m.Sum(nil)); i == 0 || score > bestScore {
			best, bestScore = c, score
		}
	}
	return set.dummies[best]
}

// usePickKey derives the key of dummyFor from the store's fingerprint
// secret. Call it before the first bind.
func (a *accountAuth) usePickKey(secret *state.Secret) {
	if secret == nil {
		return
	}
	m := secret.MAC()
	m.Write([]byte("smppproxy: the bcrypt cost an unknown system_id is checked at"))
	a.pick = m.Sum(nil)
}

func (a *accountAuth) isDisabled(id string) bool {
	_, ok := a.disabled.Load(id)
	return ok
}

// account returns the configuration in force of account id, or nil.
func (a *accountAuth) account(id string) *config.Account {
	return a.set.Load().byID[id]
}

// Authenticate checks the bind once the back-off lets it (see Bind
// hardening); a refusal is counted for back-off and logged (rate-limited).
func (a *accountAuth) Authenticate(ctx context.Context, r smppserver.BindRequest) (*smppserver.Principal, smpp.Status) {
	ip := smppserver.RemoteIP(r.Remote).String()
	ticket, wait, ok := a.backoff.admit(ip, r.SystemID)
	if !ok {
		a.logRefusal(ip, "bind refused: backing off after failed binds, not checked", r, wait)
		return nil, smpp.StatusBindFail
	}
	outcome := checkNone
	defer func() { a.backoff.done(ticket, outcome) }()
	if wait > 0 {
		a.sleep(ctx, wait)
		if ctx.Err() != nil {
			return nil, smpp.StatusBindFail // the session ended while it waited
		}
	}
	acc, refusal, err := a.check(ctx, r)
	if err != nil {
		// No check slot before the bind's deadline: not a failed guess.
		a.logRefusal(ip, "bind refused: no password check slot before bind_timeout", r, wait)
		return nil, smpp.StatusBindFail
	}
	if refusal != bindAccepted {
		outcome = checkFailed
		a.logRefusal(ip, "bind refused: "+refusal.String(), r, wait)
		return nil, smpp.StatusBindFail
	}
	outcome = checkPassed
	return &smppserver.Principal{Account: acc.SystemID, MaxBinds: acc.MaxBinds, Window: acc.Window, Value: acc}, smpp.StatusOK
}

// check returns the account, or why the bind is refused. The password is
// checked before the address so that a known system_id from a refused
// network costs what an unknown one does. err is set when ctx ended before
// a bcrypt check could start.
func (a *accountAuth) check(ctx context.Context, r smppserver.BindRequest) (*config.Account, bindRefusal, error) {
	set := a.set.Load()
	acc, ok := set.byID[r.SystemID]
	if !ok {
		if _, err := a.verify(ctx, a.dummyFor(set, r.SystemID), "\x00", r.Password); err != nil {
			return nil, bindAccepted, err
		}
		return nil, refusedUnknownSystemID, nil
	}
	match, err := a.verify(ctx, []byte(acc.PasswordHash), acc.Password, r.Password)
	switch {
	case err != nil:
		return nil, bindAccepted, err
	case !match:
		return nil, refusedWrongPassword, nil
	case !acc.Allows(smppserver.RemoteIP(r.Remote)):
		return nil, refusedAddress, nil
	case a.isDisabled(acc.SystemID):
		return nil, refusedDisabled, nil
	}
	return acc, bindAccepted, nil
}

// bindRefusal is why check refused a bind; its String ends the log
// message "bind refused: …".
type bindRefusal uint8

// Bind refusals.
const (
	bindAccepted bindRefusal = iota
	refusedUnknownSystemID
	refusedWrongPassword
	refusedAddress
	refusedDisabled
)

var bindRefusalNames = [...]string{
	bindAccepted:           "accepted",
	refusedUnknownSystemID: "unknown system_id",
	refusedWrongPassword:   "wrong password",
	refusedAddress:         "address not in allowed_networks",
	refusedDisabled:        "account disabled by an operator",
}

func (r bindRefusal) String() string {
	if int(r) < len(bindRefusalNames) {
		return bindRefusalNames[r]
	}
	return "unknown"
}

// verify compares given with the bcrypt hash, or with plain when there is
// no hash. A bcrypt check waits for a slot of the semaphore until ctx ends.
func (a *accountAuth) verify(ctx context.Context, hash []byte, plain, given string) (bool, error) {
	if len(hash) == 0 {
		return subtle.ConstantTimeCompare([]byte(plain), []byte(given)) == 1, nil
	}
	select {
	case a.checks <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-a.checks }()
	return a.compare(hash, []byte(given)) == nil, nil
}

// logRefusal logs a refused bind, at most once per source address per
// bindLogInterval. Never the password.
func (a *accountAuth) logRefusal(ip, msg string, r smppserver.BindRequest, delay time.Duration) {
	ok, suppressed := a.logLimit.Allow(ip)
	if !ok {
		return
	}
	a.log.Warn(msg, "system_id", r.SystemID, "remote", r.Remote.String(), "bind", r.Type.String(),
		"delay", delay, "suppressed", suppressed)
}

// bindBackoff spaces the password checks per source address and per
// system_id (see Bind hardening). Keys are bounded (logx.Recent): with
// bindBackoffKeys tracked, keys without a check running and untouched for
// bindBackoffQuiet are dropped, and if none can go further keys share one
// overflow entry.
//
// An address that bound a system_id successfully within bindTrustFor
// (from the bind, or from the end of that session) is not held back by
// that system_id's spacing (its own address's still applies; the latest
// trustPerAccount addresses of each system_id are kept): otherwise anyone
// knowing a system_id could keep its client from binding by failing binds
// of it from elsewhere, their refusals unchecked costing them nothing
// (from review).
type bindBackoff struct {
	now     func() time.Time
	mu      sync.Mutex
	keys    *logx.Recent[backoffState] // touched when a bind is admitted and when its check ends
	trusted *logx.Recent[trustList]    // by system_id: the addresses it bound from, touched at each
}

// bindTrustFor is how long an address that bound a system_id is spared
// that system_id's spacing.
const bindTrustFor = 24 * time.Hour

// backoffState is one address's or system_id's.
type backoffState struct {
	fails    int       // failures since the key was last quiet
	lastFail time.Time // when the last was
	checking int       // binds admitted whose check has not ended
	next     time.Time // the earliest start of the key's next check
}

// checkOutcome is how an admitted bind's check ended (bindBackoff.done).
type checkOutcome uint8

const (
	checkNone   checkOutcome = iota // not checked (no slot, the session ended): counts nothing
	checkFailed                     // a wrong password, an unknown system_id, a refused address
	checkPassed
)

// backoffTicket is an admitted bind's: the entries admit counted it in,
// which done uncounts (looking them up again could find others: the
// overflow entry then, a key's own now).
type backoffTicket struct {
	es           [2]*logx.RecentEntry[backoffState] // the address's, the system_id's
	ip, systemID string
}

func newBindBackoff(now func() time.Time) *bindBackoff {
	idle := func(v *backoffState) bool { return v.checking == 0 }
	return &bindBackoff{now: now,
		keys:    logx.NewRecent[backoffState](bindBackoffKeys, bindBackoffQuiet, idle),
		trusted: logx.NewRecent[trustList](bindBackoffKeys, bindTrustFor, nil)}
}

// backoffDelay is the spacing after n recent failures and running checks.
func backoffDelay(n int) time.Duration {
	d := bindBackoffBase
	for i := 1; i < n && d < bindBackoffMax; i++ {
		d *= 2
	}
	return min(d, bindBackoffMax)
}

// admit reserves the next check of ip and of systemID (of ip alone when
// ip bound systemID recently): wait is how long the bind waits before its
// check. ok is false when that would be longer than bindBackoffMax: the
// bind is then refused unchecked, and nothing is reserved. An admitted
// bind must end with done.
func (b *bindBackoff) admit(ip, systemID string) (t backoffTicket, wait time.Duration, ok bool) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := [...]string{"ip:" + ip, "id:" + systemID}
	trusted := b.isTrusted(ip, systemID, now)
	// Refused first, from the entries as they are: a refused bind makes
	// and touches none (from review: binds refused unchecked, free, for
	// random system_ids filled the table in a minute, and every new
	// client then shared the overflow entry).
	var cur [2]*logx.RecentEntry[backoffState]
	for i, k := range keys {
		cur[i] = b.keys.Lookup(k)
	}
	if wait = turnOf(gatingOf(cur, trusted), now); wait > bindBackoffMax {
		return backoffTicket{}, wait, false
	}
	t = backoffTicket{ip: ip, systemID: systemID}
	for i, k := range keys {
		e := b.keys.Get(k, now)
		if e.Value.fails > 0 && now.Sub(e.Value.lastFail) >= bindBackoffQuiet {
			e.Value.fails = 0
		}
		// Touched now: a new entry counts as the oldest, and the next
		// Get, when the table is full, would drop it under this bind.
		b.keys.Touch(e, now)
		t.es[i] = e
	}
	// The entries Get gave may differ from those looked up (the shared
	// one, room made by dropping old ones): their turn counts too.
	gating := gatingOf(t.es, trusted)
	if wait = turnOf(gating, now); wait > bindBackoffMax {
		return backoffTicket{}, wait, false
	}
	start := now.Add(wait)
	for _, e := range gating {
		if n := spacingCount(e.Value); n > 0 {
			if next := start.Add(backoffDelay(n)); next.After(e.Value.next) {
				e.Value.next = next
			}
		}
	}
	for _, e := range t.es {
		e.Value.checking++
	}
	return t, wait, true
}

// gatingOf is which of an address's and a system_id's entries space a
// bind: both, or the address's alone for an address trusted for the
// system_id; and not the shared overflow entry for a trusted address
// (trust proves the password was known; from review: a full table, the
// address's entry gone, kept a trusted client out).
func gatingOf(es [2]*logx.RecentEntry[backoffState], trusted bool) []*logx.RecentEntry[backoffState] {
	if !trusted {
		return es[:]
	}
	if es[0] != nil && es[0].Shared() {
		return nil
	}
	return es[:1]
}

// turnOf is how long a bind waits for the turn of every entry of es (nil
// entries: keys without one, not spaced).
func turnOf(es []*logx.RecentEntry[backoffState], now time.Time) time.Duration {
	start := now
	for _, e := range es {
		if e != nil && e.Value.next.After(start) {
			start = e.Value.next
		}
	}
	return start.Sub(now)
}

// bindBurst is how many checks of a key without recent failures may run at
// once unspaced: beyond it, each running check counts as a failure would
// (from review: a burst of guesses against a quiet account was checked
// whole before the first failure was counted, again after every quiet
// minute). Above what a client opening its binds at once needs.
const bindBurst = 64

// spacingCount is what the delay after a check of v doubles for: its
// recent failures and its checks running, or, while it has none, its
// checks running beyond bindBurst.
func spacingCount(v backoffState) int {
	if v.fails > 0 {
		return v.fails + v.checking
	}
	return max(v.checking+2-bindBurst, 0) // (checking: the others; this one is bindBurst-th at checking+1)
}

// done ends an admitted bind's check: a failure is counted against its
// address and system_id and holds their next check back by the delay it
// brings; a success forgets the system_id's failures (not the address's,
// nor the overflow entry's, which other keys share) and trusts the
// address for that system_id.
func (b *bindBackoff) done(t backoffTicket, outcome checkOutcome) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range t.es {
		e.Value.checking = max(e.Value.checking-1, 0)
		if outcome == checkFailed {
			e.Value.fails++
			e.Value.lastFail = now
			if next := now.Add(backoffDelay(e.Value.fails)); next.After(e.Value.next) {
				e.Value.next = next
			}
		}
		// Back in touch order, whatever the outcome: an entry set aside
		// while its check ran would otherwise never be dropped.
		b.keys.Touch(e, now)
	}
	if outcome != checkPassed {
		return
	}
	if id := t.es[1]; !id.Shared() {
		id.Value.fails = 0
		if id.Value.next.After(now) {
			id.Value.next = now
		}
	}
	b.trustLocked(t.ip, t.systemID, now)
}

// trust trusts ip for systemID for bindTrustFor from now: a bind of
// systemID from ip ended (a session that stayed bound longer than that
// would otherwise reconnect untrusted).
func (b *bindBackoff) trust(ip, systemID string) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trustLocked(ip, systemID, now)
}

func (b *bindBackoff) trustLocked(ip, systemID string, now time.Time) {
	g := b.trusted.Get(systemID, now)
	if g.Shared() {
		return
	}
	g.Value.add(ip, now)
	b.trusted.Touch(g, now)
}

// isTrusted reports whether ip bound systemID within bindTrustFor.
func (b *bindBackoff) isTrusted(ip, systemID string, now time.Time) bool {
	// (The shared overflow entry is never given trust: it has none.)
	g := b.trusted.Lookup(systemID)
	return g != nil && g.Value.has(ip, now)
}

// trustList is the addresses a system_id bound from lately, the latest
// trustPerAccount at most: per account, so that one account binding from
// many addresses (an IPv6 prefix) cannot push the others' out (from
// review: one table of pairs, filled by one tenant, trusted nobody else).
type trustList struct {
	ips []trustedIP
}

type trustedIP struct {
	ip string
	at time.Time
}

const trustPerAccount = 64

func (l *trustList) add(ip string, now time.Time) {
	for i := range l.ips {
		if l.ips[i].ip == ip {
			l.ips[i].at = now
			return
		}
	}
	if len(l.ips) < trustPerAccount {
		l.ips = append(l.ips, trustedIP{ip, now})
		return
	}
	oldest := 0
	for i := range l.ips {
		if l.ips[i].at.Before(l.ips[oldest].at) {
			oldest = i
		}
	}
	l.ips[oldest] = trustedIP{ip, now}
}

func (l *trustList) has(ip string, now time.Time) bool {
	for _, t := range l.ips {
		if t.ip == ip {
			return now.Sub(t.at) < bindTrustFor
		}
	}
	return false
}

// sessionClosed trusts the address of a session that was bound for its
// account again as it ends (smppserver.Server.OnClosed): binds last days,
// and the client reconnecting after one must not be held back by its
// account's spacing (from review: trust lapsed 24 h after the bind).
func (a *accountAuth) sessionClosed(ss *smppserver.Session) {
	if p := ss.Principal(); p != nil {
		a.backoff.trust(smppserver.RemoteIP(ss.RemoteAddr()).String(), p.Account)
	}
}
