package proxy

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// An unknown system_id is checked against a bcrypt hash of one of the
// configured costs, the same one every time for that system_id, and every
// configured cost is used for some: a wrong password for an account costs
// what an unknown system_id may, so the existence of an account cannot be
// told by timing. (It was always the highest cost: with accounts hashed at
// two costs, the cheaper ones answered a wrong password several times
// faster than an unknown system_id, from review.)
func TestUnknownSystemIDsAreCheckedAtTheConfiguredBcryptCostsAlike(t *testing.T) {
	accts := []config.Account{
		account("low", "", hashOf(t, "pw", bcrypt.MinCost)),
		account("high", "", hashOf(t, "pw", bcrypt.MinCost+2)),
	}
	a, _, _ := testAccountAuth(nil, accts)
	var compared [][]byte
	a.compare = func(hash, pw []byte) error {
		compared = append(compared, hash)
		return bcrypt.CompareHashAndPassword(hash, pw)
	}
	seenIPs := map[string]bool{}
	costOf := func(id string) int {
		t.Helper()
		compared = nil
		// From an address of its own: the back-off spaces an address's
		// checks, and would refuse a run of failures from one unchecked.
		ip := fmt.Sprintf("198.51.100.%d", len(seenIPs))
		seenIPs[ip] = true
		if _, st := a.Authenticate(t.Context(), bindFrom(ip, id, "pw")); st != smpp.StatusBindFail {
			t.Fatalf("bind as an unknown system_id = %v, want ESME_RBINDFAIL", st)
		}
		if len(compared) != 1 {
			t.Fatalf("bcrypt checks for an unknown system_id = %d, want 1", len(compared))
		}
		cost, err := bcrypt.Cost(compared[0])
		if err != nil {
			t.Fatal(err)
		}
		return cost
	}
	seen := map[int]int{}
	for i := range 32 {
		id := fmt.Sprint("nobody-", i)
		c := costOf(id)
		if c != bcrypt.MinCost && c != bcrypt.MinCost+2 {
			t.Fatalf("unknown system_id %s checked at cost %d, want one of the configured %d, %d", id, c, bcrypt.MinCost, bcrypt.MinCost+2)
		}
		if again := costOf(id); again != c {
			t.Fatalf("unknown system_id %s checked at cost %d, then %d; want the same each time", id, c, again)
		}
		seen[c]++
	}
	if len(seen) != 2 {
		t.Errorf("32 unknown system_ids checked at costs %v; want both configured costs used", seen)
	}
	if _, st := a.Authenticate(t.Context(), bindFrom("192.0.2.1", "high", "pw")); st != smpp.StatusOK {
		t.Errorf("bind with the right password = %v, want 0", st)
	}
}

// With plain-password accounts beside hashed ones, some unknown system_ids
// are checked as a plain password is (no bcrypt), so that the fast refusal
// of a wrong plain password does not tell that account apart either (from
// review: every unknown system_id cost a bcrypt check).
func TestUnknownSystemIDsAreCheckedAsPlainPasswordsTooWhenSomeAccountsHaveOne(t *testing.T) {
	a, _, _ := testAccountAuth(nil, []config.Account{
		account("hashed", "", hashOf(t, "pw", bcrypt.MinCost)),
		account("plain", "pw", ""),
	})
	checks := 0
	a.compare = func(hash, pw []byte) error {
		checks++
		return bcrypt.CompareHashAndPassword(hash, pw)
	}
	without := 0
	for i := range 32 {
		before := checks
		// Each from an address of its own, which the back-off does not
		// hold back.
		if _, st := a.Authenticate(t.Context(), bindFrom(fmt.Sprint("198.51.100.", i), fmt.Sprint("nobody-", i), "pw")); st != smpp.StatusBindFail {
			t.Fatalf("bind as an unknown system_id = %v, want ESME_RBINDFAIL", st)
		}
		if checks == before {
			without++
		}
	}
	if without == 0 || without == 32 {
		t.Errorf("%d of 32 unknown system_ids were checked without bcrypt; want some, as a plain password is, and not all", without)
	}
}

// The password checks of a source address and of a system_id with recent
// failures are spaced by a delay that doubles per failure (the larger of
// the two applies), up to a cap, whatever the password: a right password
// waits its turn too. A success forgets its system_id's failures but not
// its address's, and a quiet period forgets both. (Before, only the answer
// to a failure was delayed, after the check: a right password was answered
// at once, so an attacker hung up when no answer came within a check's
// time and guessed again on another connection, at full speed; and a bind
// with an account of its own cleared its address's count. From review.)
func TestBindChecksOfAnAddressOrSystemIDWithRecentFailuresAreSpaced(t *testing.T) {
	accts := []config.Account{account("shop", "secret", ""), account("bank", "secret", "")}
	a, clock, delays := testAccountAuth(nil, accts)
	a.sleep = func(_ context.Context, d time.Duration) {
		*delays = append(*delays, d)
		clock.Advance(d)
	}
	bind := func(ip, id, pw string, want smpp.Status) time.Duration {
		t.Helper()
		before := len(*delays)
		if _, st := a.Authenticate(t.Context(), bindFrom(ip, id, pw)); st != want {
			t.Fatalf("bind %s from %s = %v, want %v", id, ip, st, want)
		}
		switch len(*delays) - before {
		case 0:
			return 0
		case 1:
			return (*delays)[before]
		}
		t.Fatalf("bind %s from %s: %d waits, want at most 1", id, ip, len(*delays)-before)
		return 0
	}
	fail := func(ip, id string) time.Duration { t.Helper(); return bind(ip, id, "wrong", smpp.StatusBindFail) }
	ms := time.Millisecond
	for i, want := range []time.Duration{0, 100 * ms, 200 * ms, 400 * ms} {
		if got := fail("192.0.2.1", "shop"); got != want {
			t.Errorf("check %d of shop from 192.0.2.1: waited %v, want %v", i+1, got, want)
		}
	}
	if got := fail("192.0.2.2", "shop"); got != 800*ms {
		t.Errorf("fifth check of shop, first from 192.0.2.2: waited %v, want 800ms (per system_id)", got)
	}
	for i, want := range []time.Duration{0, 100 * ms, 200 * ms, 400 * ms} {
		if got := fail("192.0.2.5", fmt.Sprintf("name%d", i)); got != want {
			t.Errorf("check %d from 192.0.2.5, each of a new system_id: waited %v, want %v (per address)", i+1, got, want)
		}
	}
	if got := fail("192.0.2.3", "nobody"); got != 0 {
		t.Errorf("first check from a new address for a new system_id: waited %v, want none", got)
	}
	for range 10 {
		fail("192.0.2.1", "shop")
	}
	if got := bind("192.0.2.1", "shop", "secret", smpp.StatusOK); got != 5*time.Second {
		t.Errorf("the right password after many failures: waited %v, want the 5s cap (checked in turn)", got)
	}
	// shop's failures are forgotten, not 192.0.2.1's: another account's
	// bind from there still waits.
	if got := bind("192.0.2.9", "shop", "secret", smpp.StatusOK); got != 0 {
		t.Errorf("shop from a new address after its successful bind: waited %v, want none", got)
	}
	if got := bind("192.0.2.1", "bank", "secret", smpp.StatusOK); got != 5*time.Second {
		t.Errorf("bank from 192.0.2.1, whose failures a bind of shop did not clear: waited %v, want 5s", got)
	}

	fail("192.0.2.3", "nobody")
	clock.Advance(bindBackoffQuiet)
	if got := fail("192.0.2.3", "nobody"); got != 0 {
		t.Errorf("check after %v without a failure: waited %v, want none", bindBackoffQuiet, got)
	}
}

// Binds running at once from a source address that has failed are spaced
// as failures are: each check still running counts, so a burst of
// connections gets a few checks in, and the binds that would wait beyond
// the cap are refused without one (no password checked, no check slot
// taken). From review: a burst of binds from one address were all checked
// at once, every one a bcrypt check holding one of the few slots the
// legitimate binds need.
func TestABurstOfBindsFromOneAddressGetsAFewChecksAndTheRestRefusedUnchecked(t *testing.T) {
	accts := []config.Account{account("shop", "", hashOf(t, "secret", bcrypt.MinCost))}
	a, _, delays := testAccountAuth(nil, accts)
	a.checks = make(chan struct{}, 64) // the back-off, not the slots, bounds the checks here
	if _, st := a.Authenticate(t.Context(), bindFrom("192.0.2.1", "guess", "wrong")); st != smpp.StatusBindFail {
		t.Fatalf("first bind with a wrong password = %v", st)
	}
	var entered atomic.Int32
	release := make(chan struct{})
	a.compare = func(hash, pw []byte) error {
		entered.Add(1)
		<-release
		return bcrypt.CompareHashAndPassword(hash, pw)
	}
	const binds = 20
	results := make(chan smpp.Status, binds)
	refused := 0
	for i := range binds {
		go func() {
			_, st := a.Authenticate(context.Background(), bindFrom("192.0.2.1", fmt.Sprintf("guess%d", i%2), "wrong"))
			results <- st
		}()
		// Each bind is either in its check or refused before the next
		// is sent, so the order is known.
		waitFor(t, 3*time.Second, "the bind checked or refused", func() bool {
			if len(results) > 0 {
				<-results
				refused++
				return true
			}
			return int(entered.Load())+refused == i+1
		})
	}
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms}
	if n := entered.Load(); n != int32(len(want)) {
		t.Errorf("binds checked = %d, want %d", n, len(want))
	}
	if refused != binds-len(want) {
		t.Errorf("binds refused unchecked = %d, want %d", refused, binds-len(want))
	}
	if fmt.Sprint(*delays) != fmt.Sprint(want) {
		t.Errorf("waits before the checks = %v, want %v", *delays, want)
	}
	close(release)
	for range len(want) {
		if st := <-results; st != smpp.StatusBindFail {
			t.Errorf("wrong password = %v, want ESME_RBINDFAIL", st)
		}
	}
}

// At most a fixed number of bcrypt checks run at once; a bind that cannot
// get a slot before its deadline (bind_timeout) is refused without one.
func TestConcurrentPasswordChecksAreBounded(t *testing.T) {
	accts := []config.Account{account("shop", "", hashOf(t, "secret", bcrypt.MinCost))}
	a, _, _ := testAccountAuth(nil, accts)
	a.checks = make(chan struct{}, 2)
	var inside, peak, entered atomic.Int32
	release := make(chan struct{})
	a.compare = func(hash, pw []byte) error {
		entered.Add(1)
		n := inside.Add(1)
		defer inside.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		return bcrypt.CompareHashAndPassword(hash, pw)
	}
	const binds = 6
	results := make(chan smpp.Status, binds)
	for range binds {
		go func() {
			_, st := a.Authenticate(context.Background(), bindFrom("192.0.2.1", "shop", "wrong"))
			results <- st
		}()
	}
	waitFor(t, 3*time.Second, "two bcrypt checks running", func() bool { return inside.Load() >= 2 })

	// A bind whose deadline has passed while every slot is taken is
	// refused without a check.
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	late := make(chan smpp.Status, 1)
	go func() {
		_, st := a.Authenticate(expired, bindFrom("192.0.2.9", "shop", "secret"))
		late <- st
	}()
	select {
	case st := <-late:
		if st != smpp.StatusBindFail {
			t.Errorf("bind past its deadline with every check slot taken = %v, want ESME_RBINDFAIL", st)
		}
	case <-time.After(3 * time.Second):
		t.Errorf("bind past its deadline waited for a check slot")
	}

	close(release)
	for range binds {
		if st := <-results; st != smpp.StatusBindFail {
			t.Errorf("wrong password = %v, want ESME_RBINDFAIL", st)
		}
	}
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrent bcrypt checks = %d, want 2", p)
	}
	if n := entered.Load(); n != binds {
		t.Errorf("bcrypt checks = %d, want %d (one per bind that got a slot)", n, binds)
	}
}

// Repeated bind failures from one source are logged once per interval,
// with the count of the lines held back; another source has its own line.
func TestRepeatedBindFailureLogLinesAreRateLimited(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	a, clock, _ := testAccountAuth(log, []config.Account{account("shop", "secret", "")})
	for range 5 {
		a.Authenticate(t.Context(), bindFrom("192.0.2.1", "shop", "wrong"))
	}
	a.Authenticate(t.Context(), bindFrom("192.0.2.2", "nobody", "wrong"))
	clock.Advance(bindLogInterval)
	a.Authenticate(t.Context(), bindFrom("192.0.2.1", "shop", "wrong"))

	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if strings.Contains(l, "bind refused") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 3 {
		t.Fatalf("bind refused lines = %d, want 3 (one per source, then one after the interval):\n%s", len(lines), buf.String())
	}
	// The reasons operators grep for after "bind refused: ".
	if !strings.Contains(lines[0], `"msg":"bind refused: wrong password"`) || !strings.Contains(lines[1], `"msg":"bind refused: unknown system_id"`) {
		t.Errorf("refusal lines do not name their reason:\n%s", strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[0], `"remote":"192.0.2.1:40000"`) || !strings.Contains(lines[1], `"remote":"192.0.2.2:40000"`) {
		t.Errorf("first lines are not one per source:\n%s", strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[2], `"suppressed":4`) {
		t.Errorf("line after the interval does not count the 4 held back: %s", lines[2])
	}
	if strings.Contains(buf.String(), "wrong\"") {
		t.Errorf("a password is in the log:\n%s", buf.String())
	}
}

// costOfUnknown is the bcrypt cost an unknown system_id id is checked at
// by a (0: as a plain password).
func costOfUnknown(t *testing.T, a *accountAuth, id string) int {
	t.Helper()
	h := a.dummyFor(a.set.Load(), id)
	if h == nil {
		return 0
	}
	c, err := bcrypt.Cost(h)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The cost an unknown system_id is checked at is the same after a restart
// and on every instance sharing the store (the choice is keyed by the
// store's fingerprint secret), and a reload that adds a cost moves only
// the names that go to it: a name whose class changed, where an account's
// never does, would show it is unknown (from review: a key of each
// process's own, and a choice modulo the number of costs, moved most
// unknown names at every restart and at such a reload).
func TestTheCostAnUnknownSystemIDIsCheckedAtChangesNeitherAtARestartNorForOtherCosts(t *testing.T) {
	secret := state.NewSecret([32]byte{1, 2, 3})
	two := []config.Account{account("a", "", hashOf(t, "pw", bcrypt.MinCost)), account("b", "", hashOf(t, "pw", bcrypt.MinCost+1))}
	first, _, _ := testAccountAuth(nil, two)
	first.usePickKey(secret)
	restarted, _, _ := testAccountAuth(nil, two)
	restarted.usePickKey(secret)
	before := map[string]int{}
	for i := range 300 {
		id := fmt.Sprint("nobody-", i)
		before[id] = costOfUnknown(t, first, id)
		if got := costOfUnknown(t, restarted, id); got != before[id] {
			t.Fatalf("unknown system_id %s checked at cost %d, after a restart %d; want the same", id, before[id], got)
		}
	}
	three := append(two, account("c", "", hashOf(t, "pw", bcrypt.MinCost+2)))
	first.setAccounts(three)
	moved := 0
	for id, was := range before {
		now := costOfUnknown(t, first, id)
		if now != was && now != bcrypt.MinCost+2 {
			t.Fatalf("after a reload that added cost %d, unknown system_id %s moved from cost %d to %d; want it kept or moved to the new one", bcrypt.MinCost+2, id, was, now)
		}
		if now != was {
			moved++
		}
	}
	if moved == 0 {
		t.Error("no unknown system_id moved to the cost a reload added; want about a third")
	}
}

// An address that bound an account successfully is not held back by that
// account's spacing: binds failed for it from elsewhere cannot keep its
// client out. From review: anyone knowing a system_id could fail binds of
// it from many addresses, each refused unchecked at no cost, and the
// account's client, with the right password from a clean address, was
// refused at every retry.
func TestFailedBindsOfAnAccountFromElsewhereDoNotKeepItsKnownClientOut(t *testing.T) {
	a, clock, delays := testAccountAuth(nil, []config.Account{account("shop", "secret", "")})
	a.sleep = func(_ context.Context, d time.Duration) {
		*delays = append(*delays, d)
		clock.Advance(d)
	}
	bind := func(ip, pw string) (smpp.Status, time.Duration) {
		t.Helper()
		before := len(*delays)
		_, st := a.Authenticate(t.Context(), bindFrom(ip, "shop", pw))
		if len(*delays) > before {
			return st, (*delays)[before]
		}
		return st, 0
	}
	if st, _ := bind("10.0.0.1", "secret"); st != smpp.StatusOK {
		t.Fatalf("the client's first bind = %v", st)
	}
	for i := range 10 {
		bind(fmt.Sprint("192.0.2.", i+1), "wrong")
	}
	if _, wait := bind("198.51.100.7", "wrong"); wait == 0 {
		t.Errorf("a bind of the attacked account from a new address was not spaced")
	}
	if st, wait := bind("10.0.0.1", "secret"); st != smpp.StatusOK || wait != 0 {
		t.Errorf("the known client's bind while the account is attacked = %v after %v, want 0 at once", st, wait)
	}
}

// The entries of binds whose check ran while the table of keys was full
// go back to it once their checks end, so the table never fills for good
// with them and new keys keep entries of their own. From review: such an
// entry, set aside while its check ran and never touched again, stayed
// forever; once the table held only those, every new address and
// system_id shared the overflow entry, which one failure slowed for all.
func TestBindBackoffKeysWhoseChecksRanWhileTheTableWasFullAreDroppedLater(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBindBackoff(clock.Now)
	var tickets []backoffTicket
	for i := range bindBackoffKeys/2 - 1 {
		tk, _, ok := b.admit(fmt.Sprint("ip", i), fmt.Sprint("id", i))
		if !ok {
			t.Fatalf("bind %d refused", i)
		}
		tickets = append(tickets, tk)
	}
	clock.Advance(2 * bindBackoffQuiet)
	extra, _, _ := b.admit("ip-extra", "id-extra") // the table full of checks running
	for _, tk := range append(tickets, extra) {
		b.done(tk, checkPassed)
	}
	clock.Advance(2 * bindBackoffQuiet)
	tk, _, ok := b.admit("ip-new", "id-new")
	if !ok {
		t.Fatal("a bind of new keys was refused")
	}
	defer b.done(tk, checkPassed)
	if tk.es[0].Shared() || tk.es[1].Shared() {
		t.Errorf("new keys share the overflow entry (%d keys tracked): the entries of checks that ended were never dropped", b.keys.Len())
	}
}

// A successful bind whose system_id has no entry of its own (the table was
// full) does not clear the overflow entry's failures, which every key
// without an entry shares. From review: an attacker alternating guesses
// with binds of an account of its own cleared its address's count that
// way, and guessed without limit.
func TestASuccessfulBindDoesNotClearTheFailuresOfKeysWithoutAnEntry(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBindBackoff(clock.Now)
	for i := range bindBackoffKeys / 2 {
		tk, _, _ := b.admit(fmt.Sprint("ip", i), fmt.Sprint("id", i))
		b.done(tk, checkFailed) // recent failures: none can be dropped
	}
	guess, _, ok := b.admit("attacker", "victim")
	if !ok || !guess.es[0].Shared() {
		t.Fatalf("the attacker's keys have entries of their own (ok %v): the table is not full", ok)
	}
	b.done(guess, checkFailed)
	own, _, ok := b.admit("attacker", "attackers-own")
	if ok {
		b.done(own, checkPassed)
	}
	if _, wait, ok := b.admit("attacker", "victim"); ok && wait == 0 {
		t.Errorf("the next guess after a failed one and a successful bind of another account was not spaced")
	}
}

// A client bound longer than the trust lasts is trusted again when its
// session ends, so it reconnects unhindered by failed binds of its
// account from elsewhere. From review: trust lapsed 24 h after the bind,
// and binds last days. This checks what sessionClosed does (the trust
// renewed, called here directly); that the server's OnClosed calls it is
// wired in proxy.New, which no test here covers.
func TestAClientBoundLongerThanTheTrustLastsIsTrustedAgainWhenItsSessionEnds(t *testing.T) {
	a, clock, delays := testAccountAuth(nil, []config.Account{account("shop", "secret", "")})
	a.sleep = func(_ context.Context, d time.Duration) {
		*delays = append(*delays, d)
		clock.Advance(d)
	}
	if _, st := a.Authenticate(t.Context(), bindFrom("10.0.0.1", "shop", "secret")); st != smpp.StatusOK {
		t.Fatalf("the client's bind = %v", st)
	}
	clock.Advance(bindTrustFor + time.Hour) // bound all along
	a.backoff.trust("10.0.0.1", "shop")     // its session ends (sessionClosed)
	for i := range 10 {
		a.Authenticate(t.Context(), bindFrom(fmt.Sprint("192.0.2.", i+1), "shop", "wrong"))
	}
	before := len(*delays)
	if _, st := a.Authenticate(t.Context(), bindFrom("10.0.0.1", "shop", "secret")); st != smpp.StatusOK || len(*delays) != before {
		t.Errorf("the client reconnecting after a long session = %v after %d waits, want 0 at once", st, len(*delays)-before)
	}
}

// Binds refused unchecked make no entry: an address past its spacing
// cannot fill the table with random system_ids for free. From review: it
// filled all 10,000 places in a minute, and every new client then shared
// the overflow entry, which one failure elsewhere slowed for all.
func TestBindsRefusedUncheckedDoNotFillTheBackoffTable(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBindBackoff(clock.Now)
	for range 20 {
		if tk, _, ok := b.admit("6.6.6.6", "guess"); ok {
			b.done(tk, checkFailed)
		}
	}
	refused := 0
	for i := range bindBackoffKeys {
		if _, _, ok := b.admit("6.6.6.6", fmt.Sprint("rnd", i)); !ok {
			refused++
		}
	}
	if refused < bindBackoffKeys-10 {
		t.Fatalf("%d of %d binds refused unchecked; the address should be far past its spacing", refused, bindBackoffKeys)
	}
	if n := b.keys.Len(); n > 100 {
		t.Errorf("%d keys tracked after %d binds refused unchecked, want only the few checked", n, refused)
	}
	tk, wait, ok := b.admit("10.0.0.1", "newclient")
	if !ok || wait != 0 || tk.es[0].Shared() {
		t.Errorf("a new client: admitted %v after %v (shared entry %v), want at once with entries of its own", ok, wait, ok && tk.es[0].Shared())
	}
}

// The addresses trusted are kept per account: one account binding from
// many addresses (an IPv6 prefix) cannot push another account's out. From
// review: one table of pairs, filled by one tenant, trusted nobody else.
func TestOneAccountBindingFromManyAddressesLeavesOthersTrusted(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBindBackoff(clock.Now)
	for i := range bindBackoffKeys {
		if tk, _, ok := b.admit(fmt.Sprintf("2001:db8::%x", i), "tenant"); ok {
			b.done(tk, checkPassed)
		}
	}
	tk, _, ok := b.admit("10.0.0.1", "victim")
	if !ok {
		t.Fatal("the victim's bind was refused")
	}
	b.done(tk, checkPassed)
	if !b.isTrusted("10.0.0.1", "victim", clock.Now()) {
		t.Errorf("the victim's address is not trusted after its successful bind")
	}
}

// A burst of binds against an account without recent failures is spaced
// once more than bindBurst of its checks run at once, and refused unchecked
// beyond the cap: the guesses a quiet account gets are bounded before the
// first failure is counted. From review: every bind admitted before the
// first check ended was unspaced — 2,000 guesses at once from 10
// addresses, again after every quiet minute.
func TestABurstAgainstAQuietAccountIsSpacedBeyondAFewChecksAtOnce(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBindBackoff(clock.Now)
	unspaced, refused := 0, 0
	for i := range 2000 {
		_, wait, ok := b.admit(fmt.Sprint("192.0.2.", i%10), "victim") // checks still running
		switch {
		case !ok:
			refused++
		case wait == 0:
			unspaced++
		}
	}
	if unspaced > bindBurst {
		t.Errorf("%d binds of a quiet account checked at once unspaced, want at most %d", unspaced, bindBurst)
	}
	if refused < 1900 {
		t.Errorf("%d of 2000 binds at once refused unchecked, want nearly all beyond the burst and its spacing", refused)
	}
}

// A trusted client whose address has no entry of its own (the table full
// of others' recent failures) is not held back by the shared overflow
// entry: its trust proves it knew the password. From review: failed binds
// from thousands of fresh addresses kept it out.
func TestATrustedClientIsNotHeldBackByTheSharedEntryOfAFullTable(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBindBackoff(clock.Now)
	b.trust("10.0.0.1", "shop")
	clock.Advance(2 * bindBackoffQuiet) // its address's entry, if any, may go
	for i := range 3 * bindBackoffKeys {
		if tk, _, ok := b.admit(fmt.Sprintf("2001:db8::%x", i), fmt.Sprint("x", i)); ok {
			b.done(tk, checkFailed)
		}
	}
	tk, wait, ok := b.admit("10.0.0.1", "shop")
	if !ok || wait != 0 {
		t.Errorf("the trusted client while the table is full: admitted %v after %v, want at once", ok, wait)
	}
	if ok {
		b.done(tk, checkPassed)
	}
}
