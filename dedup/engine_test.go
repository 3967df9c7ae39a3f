package dedup

import (
	"context"
	"errors"
	"github.com/smppproxy/smppproxy/config"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

func TestDecisionTable(t *testing.T) {
	unknownSt := smpp.Status(0x08)
	conflictSt := smpp.StatusKeyConflict
	tests := map[string]struct {
		first   func(n int) Result // upstream answer to the first submit
		dupText string             // text of the duplicate ("" = same)
		advance time.Duration      // clock moved between the two
		want    Answer             // answer to the duplicate
		wantFwd int                // forwards in total
		wantRec state.SubmitState
	}{
		"accepted → replay same id": {
			want: Answer{Status: 0, MessageID: "m1", Outcome: OutReplayed}, wantFwd: 1, wantRec: state.Accepted,
		},
		"rejected → same error replayed": {
			first: func(int) Result { return Result{Kind: Answered, Status: smpp.StatusInvDstAdr} },
			want:  Answer{Status: smpp.StatusInvDstAdr, Outcome: OutReplayed}, wantFwd: 1, wantRec: state.Rejected,
		},
		"unknown → unknown_status, not forwarded": {
			first: func(int) Result { return Result{Kind: Ambiguous, Err: errors.New("timeout")} },
			want:  Answer{Status: unknownSt, Outcome: OutUnknown}, wantFwd: 1, wantRec: state.Unknown,
		},
		"retryable (temporary upstream error) → forwarded again": {
			first: firstThen(Result{Kind: Answered, Status: smpp.StatusMsgQFul}, Result{Kind: Answered, Status: 0, MessageID: "m-retry"}),
			want:  Answer{Status: 0, MessageID: "m-retry", Outcome: OutForwarded}, wantFwd: 2, wantRec: state.Accepted,
		},
		"retryable (no bind) → forwarded again": {
			first: firstThen(Result{Kind: NotSent, Status: smpp.StatusSysErr}, Result{Kind: Answered, Status: 0, MessageID: "m2"}),
			want:  Answer{Status: 0, MessageID: "m2", Outcome: OutForwarded}, wantFwd: 2, wantRec: state.Accepted,
		},
		"fingerprint differs → conflict, nothing forwarded": {
			dupText: "other text",
			want:    Answer{Status: conflictSt, Outcome: OutConflict}, wantFwd: 1, wantRec: state.Accepted,
		},
		"conflict beats unknown": {
			first:   func(int) Result { return Result{Kind: Ambiguous} },
			dupText: "other text",
			want:    Answer{Status: conflictSt, Outcome: OutConflict}, wantFwd: 1, wantRec: state.Unknown,
		},
		"conflict beats rejected": {
			first:   func(int) Result { return Result{Kind: Answered, Status: smpp.StatusInvDstAdr} },
			dupText: "other text",
			want:    Answer{Status: conflictSt, Outcome: OutConflict}, wantFwd: 1, wantRec: state.Rejected,
		},
		"conflict beats retryable": {
			first:   func(int) Result { return Result{Kind: NotSent, Status: smpp.StatusSysErr} },
			dupText: "other text",
			want:    Answer{Status: conflictSt, Outcome: OutConflict}, wantFwd: 1, wantRec: state.Retryable,
		},
		"expired → a new operation": {
			advance: 73 * time.Hour,
			want:    Answer{Status: 0, MessageID: "m2", Outcome: OutForwarded}, wantFwd: 2, wantRec: state.Accepted,
		},
		"expired conflict → a new operation too": {
			advance: 73 * time.Hour, dupText: "other text",
			want: Answer{Status: 0, MessageID: "m2", Outcome: OutForwarded}, wantFwd: 2, wantRec: state.Accepted,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := &fakeForwarder{answer: tc.first}
			e, st, clk := newEngine(t, f)
			p := Policy{}
			e.Submit(ctx, "shop", p, submit(t, "otp-1", "code 1234"))
			clk.Advance(tc.advance)
			text := "code 1234"
			if tc.dupText != "" {
				text = tc.dupText
			}
			got := e.Submit(ctx, "shop", p, submit(t, "otp-1", text))
			if got.Status != tc.want.Status || got.MessageID != tc.want.MessageID || got.Outcome != tc.want.Outcome {
				t.Errorf("Decide(duplicate) = {%v %q %s}, want {%v %q %s}", got.Status, got.MessageID, got.Outcome, tc.want.Status, tc.want.MessageID, tc.want.Outcome)
			}
			if n := f.count(); n != tc.wantFwd {
				t.Errorf("forwards = %d, want %d", n, tc.wantFwd)
			}
			rec, err := st.Get(ctx, state.Key{Account: "shop", Key: "k:otp-1"})
			if err != nil || rec.State != tc.wantRec {
				t.Errorf("record = %v (%v), want state %s", rec, err, tc.wantRec)
			}
		})
	}
}

// Duplicates that arrive while the owner waits for the upstream join it:
// each gets the owner's answer (joined), and the upstream sees one submit.
func TestSentOwnerIsJoinedByConcurrentDuplicates(t *testing.T) {
	f := &fakeForwarder{release: make(chan struct{}), written: make(chan struct{})}
	e, _, _ := newEngine(t, f)
	const n = 50
	p := Policy{InflightWait: time.Minute}
	answers := make(chan Answer, n)
	owner := func() { answers <- e.Submit(ctx, "shop", p, submit(t, "otp-7", "code 7")) }
	go owner()
	<-f.written // the owner's submit is upstream, its answer held back
	var wg sync.WaitGroup
	for range n - 1 {
		wg.Go(owner)
	}
	k := state.Key{Account: "shop", Key: "k:otp-7"}
	testkit.Eventually(t, 10*time.Second, func() bool { return e.joinersOf(k) == n-1 }, "every duplicate joined the flight")
	close(f.release)
	wg.Wait()
	outcomes := map[Outcome]int{}
	for range n {
		a := <-answers
		if a.Status != 0 || a.MessageID != "m1" {
			t.Errorf("answer = {%v %q %s}, want {0 m1}", a.Status, a.MessageID, a.Outcome)
		}
		outcomes[a.Outcome]++
	}
	if outcomes[OutForwarded] != 1 || outcomes[OutJoined] != n-1 || len(outcomes) != 2 {
		t.Errorf("outcomes = %v, want 1 forwarded and %d joined", outcomes, n-1)
	}
	if c := f.count(); c != 1 {
		t.Errorf("forwards = %d, want 1", c)
	}
}

// joinersOf is how many duplicates joined the flight of k (0: none in flight).
func (e *Engine) joinersOf(k state.Key) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f := e.fl[k]; f != nil {
		return f.joiners
	}
	return 0
}

func TestSentByAnotherOwnerTimesOutWithThrottled(t *testing.T) {
	f := &fakeForwarder{}
	e, st, clk := newEngine(t, f)
	s := submit(t, "k9", "text")
	// Another proxy instance owns the record and is still waiting upstream.
	_, _, err := st.Create(ctx, &state.Record{Key: state.Key{Account: "shop", Key: "k:k9"}, Fingerprint: s.Fingerprint(), State: state.Sent, Owner: "other/1", Expires: clk.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got := e.Submit(ctx, "shop", Policy{InflightWait: 100 * time.Millisecond}, s)
	if got.Status != smpp.StatusThrottled || f.count() != 0 {
		t.Errorf("Submit while another owner is in flight = %v (forwards %d), want ESME_RTHROTTLED and no forward", got.Status, f.count())
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("answered after %v, want to wait inflight_wait (100ms) first", el)
	}
}

func TestConflictWhileSent(t *testing.T) {
	f := &fakeForwarder{release: make(chan struct{}), written: make(chan struct{})}
	e, _, _ := newEngine(t, f)
	done := make(chan Answer)
	go func() { done <- e.Submit(ctx, "shop", Policy{}, submit(t, "s1", "original")) }()
	<-f.written // the owner is upstream, its answer held back
	got := e.Submit(ctx, "shop", Policy{}, submit(t, "s1", "other content"))
	if got.Status != smpp.StatusKeyConflict || got.Outcome != OutConflict {
		t.Errorf("other content while the owner is in flight = {%v %s}, want conflict", got.Status, got.Outcome)
	}
	close(f.release)
	if a := <-done; a.Status != 0 || f.count() != 1 {
		t.Errorf("owner = %v, forwards %d; want 0 and 1", a.Status, f.count())
	}
}

// getSignal is a store that announces the first Get (a duplicate polling
// for another owner's answer).
type getSignal struct {
	state.Store
	once sync.Once
	got  chan struct{}
}

// Get signals once its first read is done: a write the test makes on the
// signal lands after that read, never before it.
func (s *getSignal) Get(ctx context.Context, k state.Key) (*state.Record, error) {
	r, err := s.Store.Get(ctx, k)
	s.once.Do(func() { close(s.got) })
	return r, err
}

func TestSentByAnotherOwnerIsJoinedWhenItResolves(t *testing.T) {
	f := &fakeForwarder{}
	c := newClock()
	st := &getSignal{Store: state.NewMem(c.Now), got: make(chan struct{})}
	e := newTestEngine(t, Config{Store: st, Forwarder: f, Now: c.Now, InstanceID: "test"})
	s := submit(t, "k10", "text")
	k := state.Key{Account: "shop", Key: "k:k10"}
	if _, _, err := st.Create(ctx, &state.Record{Key: k, Fingerprint: s.Fingerprint(), State: state.Sent, Owner: "other/1", Expires: c.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	go func() {
		<-st.got // the duplicate waits for the other owner
		_, _ = st.Update(ctx, k, func(r *state.Record) error { r.State, r.MessageID = state.Accepted, "other-id"; return nil })
	}()
	got := e.Submit(ctx, "shop", Policy{InflightWait: time.Minute}, s)
	if got.Status != 0 || got.MessageID != "other-id" || got.Outcome != OutJoined {
		t.Errorf("Submit = {%v %q %s}, want {0 other-id joined}", got.Status, got.MessageID, got.Outcome)
	}
}

func TestKeyPolicies(t *testing.T) {
	long := make([]byte, 256)
	for i := range long {
		long[i] = 'x'
	}
	tests := map[string]struct {
		p          Policy
		key        string
		wantStatus smpp.Status
		wantOut    Outcome
		twiceFwd   int // forwards after submitting the same thing twice
	}{
		"tlv key dedups":               {Policy{}, "a", 0, OutReplayed, 1},
		"missing key, forward":         {Policy{}, "", 0, OutUntracked, 2},
		"missing key, reject":          {Policy{MissingKey: config.MissingReject}, "", smpp.StatusMissingTLV, OutInvalid, 0},
		"missing key, fingerprint":     {Policy{MissingKey: config.MissingFingerprint}, "", 0, OutReplayed, 1},
		"fingerprint policy":           {Policy{Key: config.KeyFingerprint}, "", 0, OutReplayed, 1},
		"none policy":                  {Policy{Key: config.KeyNone}, "a", 0, OutUntracked, 2},
		"key of 256 octets is refused": {Policy{}, string(long), smpp.StatusInvTLVVal, OutInvalid, 0},
		"key of NULs only is refused":  {Policy{}, "\x00", smpp.StatusInvTLVVal, OutInvalid, 0},
		"trailing NUL trimmed, dedups": {Policy{}, "abc\x00", 0, OutReplayed, 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := &fakeForwarder{}
			e, _, _ := newEngine(t, f)
			e.Submit(ctx, "shop", tc.p, submit(t, tc.key, "hello"))
			got := e.Submit(ctx, "shop", tc.p, submit(t, tc.key, "hello"))
			if got.Status != tc.wantStatus || got.Outcome != tc.wantOut {
				t.Errorf("second Submit = {%v %s}, want {%v %s}", got.Status, got.Outcome, tc.wantStatus, tc.wantOut)
			}
			if f.count() != tc.twiceFwd {
				t.Errorf("forwards = %d, want %d", f.count(), tc.twiceFwd)
			}
		})
	}
}

func TestFingerprintWindow(t *testing.T) {
	f := &fakeForwarder{}
	e, _, clk := newEngine(t, f)
	p := Policy{Key: config.KeyFingerprint, FingerprintWindow: time.Minute}
	e.Submit(ctx, "shop", p, submit(t, "", "same text"))
	clk.Advance(30 * time.Second)
	e.Submit(ctx, "shop", p, submit(t, "", "same text"))
	if f.count() != 1 {
		t.Fatalf("inside the window: forwards = %d, want 1", f.count())
	}
	clk.Advance(31 * time.Second)
	e.Submit(ctx, "shop", p, submit(t, "", "same text"))
	if f.count() != 2 {
		t.Errorf("outside the window: forwards = %d, want 2", f.count())
	}
}

func TestSegmentsAreSeparateRecords(t *testing.T) {
	f := &fakeForwarder{}
	e, _, _ := newEngine(t, f)
	seg := func(i byte) *smpp.Submit {
		s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(1, smpptest.SubmitFields{Dst: "1", EsmClass: 0x40,
			ShortMessage: []byte{0x05, 0x00, 0x03, 0x11, 0x03, i, 'p', i},
			TLVs:         []smpp.TLV{{Tag: smpp.DefaultIdempotencyTag, Value: []byte("long-1")}}}))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ids := map[string]bool{}
	for i := byte(1); i <= 3; i++ {
		a := e.Submit(ctx, "shop", Policy{}, seg(i))
		if a.Status != 0 || a.Outcome != OutForwarded {
			t.Fatalf("segment %d: %v %s, want forwarded", i, a.Status, a.Outcome)
		}
		ids[a.MessageID] = true
	}
	if len(ids) != 3 || f.count() != 3 {
		t.Fatalf("3 segments gave %d ids and %d forwards, want 3 and 3", len(ids), f.count())
	}
	again := e.Submit(ctx, "shop", Policy{}, seg(2))
	if again.MessageID != "m2" || again.Outcome != OutReplayed {
		t.Errorf("retry of segment 2 = {%q %s}, want {m2 replayed}", again.MessageID, again.Outcome)
	}
}

func TestStoreFailureRefusesAndForwardsNothing(t *testing.T) {
	f := &fakeForwarder{}
	st := storetest.NewFaulty(state.NewMem(nil))
	e := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "test"})
	st.FailWrites(errors.New("disk full"))
	got := e.Submit(ctx, "shop", Policy{}, submit(t, "k", "t"))
	if got.Status != smpp.StatusSysErr || f.count() != 0 {
		t.Errorf("Submit with a failing store = %v (forwards %d), want ESME_RSYSERR and 0 forwards", got.Status, f.count())
	}
}

func TestRecoverTurnsSentIntoUnknown(t *testing.T) {
	f := &fakeForwarder{}
	e, st, clk := newEngine(t, f)
	s := submit(t, "k", "t")
	k := state.Key{Account: "shop", Key: "k:k"}
	if _, _, err := st.Create(ctx, &state.Record{Key: k, Fingerprint: s.Fingerprint(), State: state.Sent, Owner: "dead/1", Expires: clk.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	n, err := e.Recover(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Recover = %d, %v; want 1, nil", n, err)
	}
	got := e.Submit(ctx, "shop", Policy{}, s)
	if got.Status != smpp.StatusSysErr || got.Outcome != OutUnknown || f.count() != 0 {
		t.Errorf("retry after restart = {%v %s} forwards %d; want unknown_status, not forwarded", got.Status, got.Outcome, f.count())
	}
}

func TestJournalIsWrittenBeforeTheForward(t *testing.T) {
	f := &fakeForwarder{release: make(chan struct{}), written: make(chan struct{})}
	e, st, _ := newEngine(t, f)
	done := make(chan Answer)
	go func() { done <- e.Submit(ctx, "shop", Policy{}, submit(t, "j", "t")) }()
	<-f.written // the PDU is "on the wire", its answer not yet in
	rec, err := st.Get(ctx, state.Key{Account: "shop", Key: "k:j"})
	if err != nil || rec.State != state.Sent || rec.Session != "up/s1" || rec.Sequence != 1 {
		t.Errorf("record while in flight = %+v (%v), want sent with session up/s1 seq 1", rec, err)
	}
	close(f.release)
	<-done
}
