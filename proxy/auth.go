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

// Bind hardening. A failed bind is answered after a delay that doubles per
// recent failure from the same source address and for the same system_id
// (the larger applies), from bindBackoffBase up to bindBackoffMax; a
// successful bind forgets both counts, and a count is forgotten after
// bindBackoffQuiet without a failure. Refusals are logged once per source
// address per bindLogInterval, with the count of the lines held back.
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

// Authenticate checks the bind; a refusal is counted for back-off, logged
// (rate-limited) and answered after the back-off delay.
func (a *accountAuth) Authenticate(ctx context.Context, r smppserver.BindRequest) (*smppserver.Principal, smpp.Status) {
	ip := smppserver.RemoteIP(r.Remote).String()
	acc, refusal, err := a.check(ctx, r)
	if err != nil {
		// No check slot before the bind's deadline: not a failed guess.
		a.logRefusal(ip, "bind refused: no password check slot before bind_timeout", r, 0)
		return nil, smpp.StatusBindFail
	}
	if refusal != bindAccepted {
		d := a.backoff.fail(ip, r.SystemID)
		a.logRefusal(ip, "bind refused: "+refusal.String(), r, d)
		a.sleep(ctx, d)
		return nil, smpp.StatusBindFail
	}
	a.backoff.succeed(ip, r.SystemID)
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

// bindBackoff counts recent bind failures per source address and per
// system_id. Keys are bounded (logx.Recent): with bindBackoffKeys tracked,
// quiet ones are dropped, and if none is quiet further keys share one
// overflow entry.
type bindBackoff struct {
	now   func() time.Time
	mu    sync.Mutex
	fails *logx.Recent[int] // failures since the entry was last quiet; touched per failure
}

func newBindBackoff(now func() time.Time) *bindBackoff {
	return &bindBackoff{now: now, fails: logx.NewRecent[int](bindBackoffKeys, bindBackoffQuiet, nil)}
}

// fail counts a failure from ip for systemID and returns the delay before
// its answer.
func (b *bindBackoff) fail(ip, systemID string) time.Duration {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, k := range [...]string{"ip:" + ip, "id:" + systemID} {
		e := b.fails.Get(k, now)
		if now.Sub(e.Touched()) >= bindBackoffQuiet {
			e.Value = 0
		}
		e.Value++
		b.fails.Touch(e, now)
		n = max(n, e.Value)
	}
	d := bindBackoffBase
	for i := 1; i < n && d < bindBackoffMax; i++ {
		d *= 2
	}
	return min(d, bindBackoffMax)
}

// succeed forgets the failures from ip and for systemID.
func (b *bindBackoff) succeed(ip, systemID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails.Delete("ip:" + ip)
	b.fails.Delete("id:" + systemID)
}
