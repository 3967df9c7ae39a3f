package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/smppserver"
	"github.com/smppproxy/smppproxy/state"
)

// Same key resubmitted on the same session → one
// upstream submit; the retry gets the same message_id with its own
// sequence_number.
func TestRetryOnSameSessionIsReplayed(t *testing.T) {
	smsc, app := startSimProxy(t, sim.Config{})
	c := dialESME(t, app.Addr())
	if st := c.bind(smpp.CmdBindTransceiver, "shop", "secret"); st != 0 {
		t.Fatalf("bind = %v, want 0", st)
	}
	first := c.submit(10, keyed("otp-1", "Your code is 123456"))
	retry := c.submit(11, keyed("otp-1", "Your code is 123456"))
	if first.Status != 0 || first.ID == "" {
		t.Fatalf("first submit = %+v, want status 0 with an id", first)
	}
	if retry.Status != 0 || retry.ID != first.ID || retry.Seq != 11 {
		t.Errorf("retry = %+v, want status 0, id %q, sequence 11", retry, first.ID)
	}
	wantSMSCTotal(t, smsc, 1)
}

// Resubmitted after the ESME disconnects and binds again.
func TestRetryAfterReconnectIsReplayed(t *testing.T) {
	smsc, app := startSimProxy(t, sim.Config{})
	c := dialBound(t, app.Addr(), smpp.CmdBindTransmitter)
	first := c.submit(1, keyed("order-77", "Payment received"))
	c.Close()

	c2 := dialESME(t, app.Addr())
	if st := c2.bind(smpp.CmdBindTransmitter, "shop", "secret"); st != 0 {
		t.Fatalf("rebind = %v", st)
	}
	retry := c2.submit(1, keyed("order-77", "Payment received"))
	if retry.Status != 0 || retry.ID != first.ID {
		t.Errorf("retry after reconnect = %+v, want id %q", retry, first.ID)
	}
	wantSMSCTotal(t, smsc, 1)
}

// 50 concurrent submits of one key from 5 sessions →
// exactly one upstream submit, all 50 answers carry the same message_id.
func TestConcurrentDuplicatesFromFiveSessions(t *testing.T) {
	smsc, app := startSimProxy(t, sim.Config{Fault: func(sim.Call) sim.Action { return sim.Action{Delay: 50 * time.Millisecond} }})
	var conns []*esmeConn
	for range 5 {
		c := dialESME(t, app.Addr())
		if st := c.bind(smpp.CmdBindTransceiver, "shop", "secret"); st != 0 {
			t.Fatalf("bind = %v", st)
		}
		conns = append(conns, c)
	}
	var wg sync.WaitGroup
	answers := make(chan resp, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers <- conns[i%5].submit(uint32(100+i), keyed("otp-race", "Code 999111"))
		}()
	}
	wg.Wait()
	close(answers)
	ids := map[string]int{}
	for a := range answers {
		if a.Status != 0 {
			t.Errorf("answer status = %v, want 0", a.Status)
		}
		ids[a.ID]++
	}
	if len(ids) != 1 {
		t.Errorf("distinct message ids = %v, want exactly one", ids)
	}
	wantSMSCTotal(t, smsc, 1)
}

// Same key, different text → conflict status, nothing
// forwarded.
func TestSameKeyOtherTextIsConflict(t *testing.T) {
	smsc, app := startSimProxy(t, sim.Config{})
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	first := c.submit(1, keyed("k-1", "first text"))
	if first.Status != 0 || first.ID == "" {
		t.Fatalf("first submit = %+v, want accepted", first)
	}
	got := c.submit(2, keyed("k-1", "second text"))
	if got.Status != smpp.StatusKeyConflict {
		t.Errorf("conflicting submit = %v, want %v", got.Status, smpp.StatusKeyConflict)
	}
	// The conflict leaves the record alone: the original is still replayed.
	if again := c.submit(3, keyed("k-1", "first text")); again.Status != 0 || again.ID != first.ID {
		t.Errorf("retry of the original after the conflict = %+v, want id %q", again, first.ID)
	}
	wantSMSCTotal(t, smsc, 1)
}

// Proxy stopped and started on the same data dir → a
// retry is answered from the store.
func TestRetryAfterProxyRestartIsAnsweredFromStore(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	dir := t.TempDir()
	cfg := testConfig(t, smsc.Addr(), dir)
	app := startProxy(t, cfg)
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	first := c.submit(1, keyed("restart-1", "hello"))
	app.Close()

	app2 := startProxy(t, testConfig(t, smsc.Addr(), dir))
	c2 := dialBound(t, app2.Addr(), smpp.CmdBindTransceiver)
	retry := c2.submit(5, keyed("restart-1", "hello"))
	if retry.Status != 0 || retry.ID != first.ID {
		t.Errorf("retry after restart = %+v, want id %q", retry, first.ID)
	}
	wantSMSCTotal(t, smsc, 1)
}

// A 3-segment concatenated message sharing one key → 3
// upstream submits; retrying any segment replays that segment's own id.
func TestConcatenatedSegmentsShareOneKey(t *testing.T) {
	smsc, app := startSimProxy(t, sim.Config{})
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	seg := func(i byte) smpptest.SubmitFields {
		f := keyed("long-1", "")
		f.EsmClass = 0x40
		f.ShortMessage = append([]byte{0x05, 0x00, 0x03, 0x42, 0x03, i}, bytes.Repeat([]byte{'a' + i}, 100)...)
		return f
	}
	ids := map[byte]string{}
	for i := byte(1); i <= 3; i++ {
		r := c.submit(uint32(i), seg(i))
		if r.Status != 0 {
			t.Fatalf("segment %d = %v", i, r.Status)
		}
		ids[i] = r.ID
	}
	if ids[1] == ids[2] || ids[2] == ids[3] || ids[1] == ids[3] {
		t.Fatalf("segments got ids %v, want three different ids", ids)
	}
	for _, i := range []byte{2, 1, 3} {
		r := c.submit(uint32(10+i), seg(i))
		if r.ID != ids[i] {
			t.Errorf("retry of segment %d = %q, want %q", i, r.ID, ids[i])
		}
	}
	wantSMSCTotal(t, smsc, 3)
}

// The simulator drops the response → after
// response_timeout the original is answered with unknown_status, the record
// is unknown, a retry gets unknown_status too and is not forwarded again.
func TestDroppedResponseBecomesUnknown(t *testing.T) {
	smsc, app := startSimProxy(t, sim.Config{Fault: func(c sim.Call) sim.Action { return sim.Action{Drop: c.KeyCount == 1} }})
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	start := time.Now()
	first := c.submit(1, keyed("lost-1", "code 42"))
	if first.Status != smpp.StatusSysErr {
		t.Fatalf("original = %v, want unknown_status 0x08", first.Status)
	}
	if el := time.Since(start); el < 400*time.Millisecond {
		t.Errorf("answered after %v, want after response_timeout (500ms)", el)
	}
	rec, err := app.Store().Get(t.Context(), state.Key{Account: "shop", Key: "k:lost-1"})
	if err != nil || rec.State != state.Unknown {
		t.Fatalf("record = %+v, %v; want unknown", rec, err)
	}
	retry := c.submit(2, keyed("lost-1", "code 42"))
	if retry.Status != smpp.StatusSysErr {
		t.Errorf("retry = %v, want unknown_status 0x08", retry.Status)
	}
	if n := smsc.Total(); n != 1 {
		t.Errorf("submits at the SMSC = %d, want 1 (never resent)", n)
	}
}

// The key TLV is stripped before forwarding unless the upstream asks for it.
func TestKeyTLVIsStrippedUpstream(t *testing.T) {
	var mu sync.Mutex
	var seen []bool
	smsc := startSim(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		_, has := c.Submit.TLV(smpp.DefaultIdempotencyTag)
		mu.Lock()
		seen = append(seen, has)
		mu.Unlock()
		return sim.Action{}
	}})
	app := startProxy(t, testConfig(t, smsc.Addr(), t.TempDir()))
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	c.submit(1, keyed("strip-1", "x"))
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] {
		t.Errorf("key TLV seen at the SMSC: %v, want stripped", seen)
	}
}

// Protocol errors each get the SPEC status and the proxy
// keeps serving other sessions.
func TestProtocolErrorsDoNotDisturbOtherSessions(t *testing.T) {
	_, app := startSimProxy(t, sim.Config{})
	good := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)

	tests := map[string]struct {
		setup  func(c *esmeConn)
		frame  []byte
		want   smpp.Status
		cmd    uint32
		closes bool // SPEC §6: a bad command_length closes the connection
	}{
		"submit before bind": {frame: smpptest.EncodeSubmit(3, keyed("a", "b")), want: smpp.StatusInvBndSts, cmd: smpp.CmdSubmitSM | smpp.RespBit},
		"submit on RX bind": {setup: func(c *esmeConn) { c.bind(smpp.CmdBindReceiver, "shop", "secret") },
			frame: smpptest.EncodeSubmit(3, keyed("a", "b")), want: smpp.StatusInvBndSts, cmd: smpp.CmdSubmitSM | smpp.RespBit},
		"unknown command id":   {frame: smpp.EncodeSimple(0x00000777, 0, 3, nil), want: smpp.StatusInvCmdID, cmd: smpp.CmdGenericNack},
		"command_length 8":     {frame: []byte{0, 0, 0, 8, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 3}, want: smpp.StatusInvCmdLen, cmd: smpp.CmdGenericNack, closes: true},
		"command_length 70000": {frame: []byte{0, 1, 0x11, 0x70, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 3}, want: smpp.StatusInvCmdLen, cmd: smpp.CmdGenericNack, closes: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := dialESME(t, app.Addr())
			if tc.setup != nil {
				tc.setup(c)
			}
			f, err := c.call(tc.frame, 3*time.Second)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			r := parseResp(f)
			if r.Status != tc.want || r.Cmd != tc.cmd || r.Seq != 3 {
				t.Errorf("%s: got cmd 0x%08X status %v seq %d, want cmd 0x%08X status %v seq 3", name, r.Cmd, r.Status, r.Seq, tc.cmd, tc.want)
			}
			if tc.closes {
				select {
				case <-c.Done():
				case <-time.After(2 * time.Second):
					t.Errorf("%s: connection still open after generic_nack 0x02", name)
				}
				return
			}
			// Any other error leaves the session usable.
			f, err = c.call(smpp.EncodeSimple(smpp.CmdEnquireLink, 0, 4, nil), 2*time.Second)
			if err != nil || parseResp(f).Status != 0 {
				t.Errorf("%s: enquire_link afterwards = %v, want answered with 0", name, err)
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		c := dialESME(t, app.Addr())
		if st := c.bind(smpp.CmdBindTransceiver, "shop", "wrong"); st != smpp.StatusBindFail {
			t.Errorf("bind with a wrong password = %v, want ESME_RBINDFAIL", st)
		}
		select {
		case <-c.Done():
		case <-time.After(2 * time.Second):
			t.Errorf("connection still open after a failed bind")
		}
	})
	for i := range 3 {
		if r := good.submit(uint32(50+i), keyed(fmt.Sprintf("after-%d", i), "ok")); r.Status != 0 {
			t.Errorf("the good session after protocol errors: %v, want 0", r.Status)
		}
	}
}

// message_id: proxy issues ids of the configured format and length, and
// replays them to retries.
func TestProxyMessageIDsFollowTheConfiguredFormatAndLengthAndReplay(t *testing.T) {
	_, cfg := simConfig(t, sim.Config{})
	cfg.Accounts[0].MessageID = config.MessageIDProxy
	cfg.Accounts[0].ProxyID = config.ProxyIDStyle{Format: config.IDDec, Length: 12}
	app := startProxy(t, cfg)
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	r := c.submit(1, keyed("pid-1", "x"))
	if r.Status != 0 || !regexp.MustCompile(`^[1-9][0-9]{11}$`).MatchString(r.ID) {
		t.Fatalf("proxy-issued id = %q (status %v), want 12 decimal digits", r.ID, r.Status)
	}
	if again := c.submit(2, keyed("pid-1", "x")); again.ID != r.ID {
		t.Errorf("retry got %q, want the same proxy id %q", again.ID, r.ID)
	}
}

// A shutdown whose deadline passes while a submit waits for an upstream
// answer does not wait response_timeout more: the submit is persisted
// unknown and the store is closed cleanly.
func TestShutdownDeadlineDoesNotWaitForResponseTimeout(t *testing.T) {
	smsc := startSim(t, sim.Config{Fault: func(sim.Call) sim.Action { return sim.Action{Drop: true} }})
	dir := t.TempDir()
	cfg := testConfig(t, smsc.Addr(), dir)
	cfg.Upstreams[0].ResponseTimeout = config.Duration(30 * time.Second)
	app, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	if err := app.WaitUpstreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	go func() { _, _ = c.call(smpptest.EncodeSubmit(1, keyed("sd-1", "x")), 40*time.Second) }()
	waitFor(t, 10*time.Second, "the submit to reach the SMSC", func() bool { return smsc.Total() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_ = app.Shutdown(ctx)
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("Shutdown took %v, want about the 300ms deadline, not response_timeout (30s)", el)
	}
	st, err := state.OpenBadger(state.BadgerOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, err := st.Get(context.Background(), state.Key{Account: "shop", Key: "k:sd-1"})
	if err != nil || rec.State != state.Unknown {
		t.Errorf("record after shutdown = %+v, %v; want unknown", rec, err)
	}
}

// New registers the proxy's metrics on Options.Registerer in one step:
// closed sessions are counted by reason, the session hooks stay the
// receipt service's; Ready follows the upstream binds.
func TestNewRegistersMetricsAndReadyFollowsBinds(t *testing.T) {
	_, cfg := simConfig(t, sim.Config{})
	reg := prometheus.NewRegistry()
	app, err := New(Options{Config: cfg, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	var ups, downs atomic.Int32
	bound := app.server.OnBound
	app.server.OnBound = func(s *smppserver.Session) {
		ups.Add(1)
		bound(s)
	}
	app.server.OnClosed = func(*smppserver.Session) { downs.Add(1) }
	if app.Metrics() == nil {
		t.Fatal("New returned no records-by-state scan")
	}
	if err := app.Ready(); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Ready before Start = %v, want ErrNotReady", err)
	}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.WaitUpstreams(ctx); err != nil {
		t.Fatal(err)
	}
	if err := app.Ready(); err != nil {
		t.Fatalf("Ready with the upstream bound = %v", err)
	}
	c, err := esme.Dial(ctx, app.Addr(), esme.Options{SystemID: "shop", Password: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unbind(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the session-down hook", func() bool { return downs.Load() > 0 })
	if ups.Load() != 1 || downs.Load() != 1 {
		t.Fatalf("earlier hook saw %d up, %d down; want 1 and 1", ups.Load(), downs.Load())
	}
	n, err := testutil.GatherAndCount(reg, "smppproxy_esme_sessions_closed_total")
	if err != nil || n == 0 {
		t.Fatalf("sessions_closed_total: %d series, %v", n, err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "smppproxy_esme_sessions_closed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			want := 0.0
			if m.GetLabel()[0].GetValue() == "unbind" {
				want = 1
			}
			if got := m.GetCounter().GetValue(); got != want {
				t.Errorf("sessions_closed_total{reason=%q} = %v, want %v", m.GetLabel()[0].GetValue(), got, want)
			}
		}
	}
}

// The Badger store reports every group commit: the commit latency and
// batch size histograms fill from the first submit.
func TestStoreCommitHistograms(t *testing.T) {
	smsc := startSim(t, sim.Config{})
	app, reg := startReceiptsProxy(t, testConfig(t, smsc.Addr(), t.TempDir()))
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	if r := c.submit(1, keyed("hist-1", "x")); r.Status != 0 {
		t.Fatalf("submit = %v", r.Status)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var batches uint64
	for _, mf := range mfs {
		if mf.GetName() == "smppproxy_store_commit_batch_size" {
			batches = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	// create, journal and outcome: at least three writes, in up to three commits.
	if batches < 1 {
		t.Errorf("smppproxy_store_commit_batch_size has %d observations after a submit, want at least 1", batches)
	}
}
