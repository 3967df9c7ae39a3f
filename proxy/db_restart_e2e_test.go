package proxy

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// withAppName returns dsn with application_name set, so that the test can
// find its own connections in pg_stat_activity.
func withAppName(t *testing.T, dsn, name string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// terminateBackends ends, server-side, every connection named app; it
// returns how many it ended.
func terminateBackends(t *testing.T, dsn, app string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// loadLog is what a load of keyed submits over two instances saw.
type loadLog struct {
	mu      sync.Mutex
	acked   map[string]string // key → the id it was accepted with
	pending []string          // keys not accepted yet, to retry
	during  map[smpp.Status]int
	outage  atomic.Bool
	t       *testing.T
}

// answer notes the answer r to a submit of key.
func (l *loadLog) answer(key string, r esme.Resp) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.outage.Load() {
		l.during[r.Status]++
	}
	switch r.Status {
	case smpp.StatusOK:
		if id, ok := l.acked[key]; ok && id != r.MessageID {
			l.t.Errorf("key %s accepted with id %q and again with %q: two messages", key, id, r.MessageID)
		}
		l.acked[key] = r.MessageID
	case smpp.StatusSysErr, smpp.StatusThrottled:
		l.pending = append(l.pending, key)
	default:
		l.t.Errorf("key %s answered %v; want accepted, ESME_RSYSERR or ESME_RTHROTTLED", key, r.Status)
	}
}

// nextRetry takes the oldest key to retry ("" when none).
func (l *loadLog) nextRetry() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) == 0 {
		return ""
	}
	k := l.pending[0]
	l.pending = l.pending[1:]
	return k
}

func (l *loadLog) isAcked(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.acked[key]
	return ok
}

func (l *loadLog) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *loadLog) refusedDuring() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.during[smpp.StatusSysErr]
}

// Two instances under steady load (distinct keys, each refused submit
// retried on the other instance) lose the database: every connection is
// ended server-side and new ones are refused for a while, then it is
// back. No key reaches the SMSC twice, every answer is an accept (with
// one id per key), ESME_RSYSERR or ESME_RTHROTTLED, both instances report
// not ready during the outage and ready after it, and both serve again.
func TestDatabaseRestartUnderLoadNeverDuplicatesAndRecovers(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "proxy_test_")
	app := "smppproxy_" + schema
	relay, rdsn := pgtest.ThroughRelay(t, withAppName(t, dsn, app))
	smsc := startSim(t, sim.Config{Fault: func(c sim.Call) sim.Action { return sim.Action{Delay: time.Duration(c.N%20) * time.Millisecond} }})
	edit := func(cfg *config.Config) {
		cfg.Upstreams[0].ForwardKeyTLV = true // the SMSC counts by key
		cfg.Upstreams[0].ResponseTimeout = config.Duration(5 * time.Second)
		cfg.Accounts[0].Idempotency.InflightWait = config.Duration(200 * time.Millisecond)
	}
	a := startShared(t, smsc.Addr(), rdsn, schema, "a", edit)
	b := startShared(t, smsc.Addr(), rdsn, schema, "b", edit)
	t.Cleanup(relay.Heal) // before the instances close
	apps := []*App{a, b}
	clients := []*esme.Client{dialClient(t, a.Addr(), smpp.BindTransmitter), dialClient(t, b.Addr(), smpp.BindTransmitter)}

	log := &loadLog{acked: map[string]string{}, during: map[smpp.Status]int{}, t: t}
	stop := make(chan struct{})
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := ""
				if i%2 == 1 {
					key = log.nextRetry()
				}
				if key == "" {
					key = fmt.Sprintf("load-%d", next.Add(1))
				}
				c := clients[(w+i)%2] // a retry goes to the other instance
				ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
				r, err := c.Submit(ctx, esme.Submit{Src: "SHOP", Dst: "447700900123", Key: key, Text: []byte("notice " + key)})
				cancel()
				if err != nil {
					t.Errorf("submit %s: %v", key, err)
					return
				}
				log.answer(key, r)
			}
		}()
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return log.ackedCount() >= 100 }, "100 keys accepted before the outage")

	log.outage.Store(true)
	killed := terminateBackends(t, dsn, app) // the restart: every connection ended server-side
	relay.Cut()                              // and refused until it is back
	if killed == 0 {
		t.Fatal("no backend of the proxies was ended: the outage would only be the relay's cut")
	}
	atCut := smsc.Total()
	for _, p := range apps {
		testkit.Eventually(t, 15*time.Second, func() bool { return p.Ready() != nil }, "not ready while the database is gone")
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return log.refusedDuring() >= 10 }, "10 submits refused with ESME_RSYSERR during the outage")
	atHeal := smsc.Total()
	relay.Heal()
	log.outage.Store(false)

	for _, p := range apps {
		testkit.Eventually(t, 30*time.Second, func() bool { return p.Ready() == nil }, "ready again once the database is back")
	}
	before := log.ackedCount()
	testkit.Eventually(t, 30*time.Second, func() bool { return log.ackedCount() >= before+100 }, "100 more keys accepted after the outage")
	close(stop)
	wg.Wait()

	for i, c := range clients {
		r, err := c.Submit(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: fmt.Sprintf("after-%d", i), Text: []byte("after")})
		if err != nil || r.Status != smpp.StatusOK {
			t.Errorf("a fresh key on instance %d after the outage = %+v, %v; want accepted", i, r, err)
		}
	}
	if n := atHeal - atCut; n > 4 {
		t.Errorf("%d submits reached the SMSC while the database was gone, want at most the 4 journaled before it went", n)
	}
	// Every key refused meanwhile is accepted by a retry now: it was never
	// sent, or its outcome was written once the database was back.
	retried := 0
	for key := log.nextRetry(); key != ""; key = log.nextRetry() {
		if log.isAcked(key) {
			continue // retried twice meanwhile
		}
		retried++
		var last smpp.Status
		ok := testkit.Poll(10*time.Second, func() bool {
			r, err := clients[retried%2].Submit(t.Context(), esme.Submit{Src: "SHOP", Dst: "447700900123", Key: key, Text: []byte("notice " + key)})
			if err != nil {
				t.Fatalf("retry of %s: %v", key, err)
			}
			log.answer(key, r)
			last = r.Status
			return r.Status == smpp.StatusOK
		})
		if !ok {
			rec, err := b.Store().Get(t.Context(), state.Key{Account: "shop", Key: "k:" + key})
			if err != nil {
				t.Fatalf("retry of %s refused after the outage (%v); its record: %v", key, last, err)
			}
			t.Fatalf("retry of %s refused after the outage (%v); its record: %s owner %s session %q history %+v", key, last, rec.State, rec.Owner, rec.Session, rec.History)
		}
	}
	if d := smsc.Duplicates(); len(d) > 0 {
		t.Errorf("keys that reached the SMSC twice: %v", d)
	}
	if n, want := smsc.Total(), int64(log.ackedCount()+len(clients)); n != want {
		t.Errorf("submits at the SMSC = %d, want %d: one per key accepted (and the two fresh keys)", n, want)
	}
	t.Logf("backends ended: %d; answers during the outage: %v; SMSC received %d at the cut, %d at the heal, %d in all; keys accepted %d, of them %d by a retry after the outage",
		killed, log.during, atCut, atHeal, smsc.Total(), log.ackedCount(), retried)
}
