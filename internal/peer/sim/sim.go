// Package sim is an SMSC simulator for tests, the demo and benchmarks. It
// is a real SMPP server (built on smppserver) that answers submit_sm with
// message ids, sends delivery receipts (after DLRDelay, or on demand with
// SendReceipt; ids in the response's format or another one, with or
// without the receipt TLVs; resent until the client accepts them, as SMSCs
// do), sends MO on demand (SendMO), answers query_sm and cancel_sm for the
// ids it issued, and misbehaves on request: it can drop or delay
// responses, lose a response of an accepted message, answer with an error
// status, or cut the connection (kfake-style control hooks). It counts what
// it received per idempotency key so tests can assert that no key reached
// the SMSC twice.
package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppserver"
)

// Action is what the simulator does with one submit_sm.
type Action struct {
	// Status answered (0 = accepted with a new message id).
	Status smpp.Status
	// Drop: never answer (the submit still counts as received).
	Drop bool
	// Delay before answering.
	Delay time.Duration
	// Disconnect: close the connection instead of answering.
	Disconnect bool
	// LoseResponse: accept the message (a message id is issued and its
	// receipt sent, as configured) but never answer: the response is
	// lost on the way back.
	LoseResponse bool
}

// Call describes one received submit_sm to a Fault hook.
type Call struct {
	// N is the 1-based number of this submit across the simulator.
	N   int64
	Key string
	// KeyCount is how many times this key was received, this one included.
	KeyCount int
	Submit   *smpp.Submit
	Session  string
}

// Config configures a Simulator. Zero values are usable.
type Config struct {
	// SystemID and Password, when set, are required from binding clients.
	SystemID, Password string
	// KeyTag is the TLV counted as the idempotency key (default 0x1400).
	// Submits without it are counted under "sm:" + a hash of destination
	// and user data.
	KeyTag uint16
	// HexIDs issues message ids in hex (as some SMSCs do); else decimal.
	HexIDs bool
	// DLRDelay, when > 0, sends a DELIVRD receipt that long after accepting
	// a submit that asked for one (registered_delivery bit 0).
	DLRDelay time.Duration
	// ReceiptIDs is how receipts write message ids: "hex" or "dec"; ""
	// writes them as the submit_sm_resp does (see HexIDs). Many SMSCs
	// answer in hex and report in decimal, or the reverse.
	ReceiptIDs string
	// ReceiptTextOnly leaves receipted_message_id and message_state out
	// of receipts: the id is only in the text's id: field.
	ReceiptTextOnly bool
	// ReceiptRetry is how long a receipt the client did not accept (no
	// receiving session bound, an error status, no answer) is sent again,
	// every 100ms, as SMSCs do (default 30s; negative: never).
	ReceiptRetry time.Duration
	// Fault decides per submit; nil = accept everything at once.
	Fault  func(c Call) Action
	Logger *slog.Logger
}

// Simulator is a running SMSC simulator.
type Simulator struct {
	cfg   Config
	srv   *smppserver.Server
	ln    net.Listener
	next  atomic.Uint64
	total atomic.Int64
	wg    sync.WaitGroup

	mu        sync.Mutex
	messages  map[string]message // accepted submits that asked for a receipt, by message id
	rr        int
	dlrOK     int
	dlrTries  int
	queried   []string
	sent      [][]byte
	perKey    map[string]int
	accepted  map[string]int
	perSec    map[int64]int
	closed    chan struct{}
	closeOnce sync.Once
}

// Start listens on addr ("127.0.0.1:0" for tests) and serves.
func Start(addr string, cfg Config) (*Simulator, error) {
	if cfg.KeyTag == 0 {
		cfg.KeyTag = smpp.DefaultIdempotencyTag
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg.ReceiptRetry == 0 {
		cfg.ReceiptRetry = 30 * time.Second
	}
	s := &Simulator{cfg: cfg, ln: ln, perKey: map[string]int{}, accepted: map[string]int{}, perSec: map[int64]int{}, messages: map[string]message{}, closed: make(chan struct{})}
	s.next.Store(1000)
	s.srv = &smppserver.Server{
		SystemID:    "smscsim",
		Handler:     smppserver.HandlerFunc(s.serve),
		Logger:      cfg.Logger,
		Window:      1000,
		EnquireLink: 30 * time.Second,
		Auth: smppserver.AuthFunc(func(_ context.Context, r smppserver.BindRequest) (*smppserver.Principal, smpp.Status) {
			if cfg.SystemID != "" && (r.SystemID != cfg.SystemID || r.Password != cfg.Password) {
				return nil, smpp.StatusBindFail
			}
			return &smppserver.Principal{Account: r.SystemID, Window: 1000}, smpp.StatusOK
		}),
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Addr is the listening address.
func (s *Simulator) Addr() string { return s.ln.Addr().String() }

// Close stops the simulator and closes every connection.
//
// The connections are closed before the handlers are told to stop, so a
// dropped or delayed submit is never answered by anything on the way out
// (the server's fallback ESME_RSYSERR would turn a lost response into a
// "temporary, not accepted" one).
func (s *Simulator) Close() {
	s.closeOnce.Do(func() {
		_ = s.srv.Close()
		close(s.closed)
		s.wg.Wait()
	})
}

// KickAll closes every client connection (the listener stays open).
func (s *Simulator) KickAll() {
	for _, ss := range s.srv.Sessions() {
		ss.Kick()
	}
}

// Sessions is the number of connected clients.
func (s *Simulator) Sessions() int { return len(s.srv.Sessions()) }

// Total is the number of submit_sm received.
func (s *Simulator) Total() int64 { return s.total.Load() }

// Count is how many submits carried key.
func (s *Simulator) Count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perKey[key]
}

// Accepted is how many submits carrying key were answered with status 0.
func (s *Simulator) Accepted(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted[key]
}

// TotalAccepted is the number of submits answered with status 0.
func (s *Simulator) TotalAccepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.accepted {
		n += v
	}
	return n
}

// Counts is a copy of the per-key counts.
func (s *Simulator) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.perKey))
	for k, v := range s.perKey {
		out[k] = v
	}
	return out
}

// Duplicates returns the keys received more than once.
func (s *Simulator) Duplicates() map[string]int {
	out := map[string]int{}
	for k, v := range s.Counts() {
		if v > 1 {
			out[k] = v
		}
	}
	return out
}

// MaxPerSecond is the largest number of submits received within one
// calendar second.
func (s *Simulator) MaxPerSecond() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := 0
	for _, v := range s.perSec {
		m = max(m, v)
	}
	return m
}

// KeyOf is the key the simulator counts a submit under.
func KeyOf(sub *smpp.Submit, tag uint16) string {
	if v, ok := sub.TLV(tag); ok {
		for len(v) > 0 && v[len(v)-1] == 0 {
			v = v[:len(v)-1]
		}
		k := string(v)
		if g := sub.Segment(); g.Total > 0 {
			k += "#" + g.String()
		}
		return k
	}
	h := sha256.New()
	h.Write(sub.DstAddr)
	h.Write([]byte{0})
	h.Write(sub.UserData())
	return "sm:" + hex.EncodeToString(h.Sum(nil)[:8])
}

func (s *Simulator) serve(ctx context.Context, w smppserver.ResponseWriter, r *smppserver.Request) {
	if r.Header.ID != smpp.CmdSubmitSM {
		switch r.Header.ID {
		case smpp.CmdQuerySM, smpp.CmdCancelSM:
			s.query(w, r)
		default:
			_ = w.WriteStatus(smpp.StatusInvCmdID)
		}
		return
	}
	sub, err := smpp.ParseSubmit(r.Frame)
	if err != nil {
		_ = w.WriteStatus(smpp.StatusInvMsgLen)
		return
	}
	key := KeyOf(sub, s.cfg.KeyTag)
	n := s.total.Add(1)
	s.mu.Lock()
	s.perKey[key]++
	kc := s.perKey[key]
	s.perSec[time.Now().Unix()]++
	s.mu.Unlock()

	act := Action{}
	if s.cfg.Fault != nil {
		act = s.cfg.Fault(Call{N: n, Key: key, KeyCount: kc, Submit: sub, Session: r.Session.ID()})
	}
	if act.Delay > 0 {
		select {
		case <-time.After(act.Delay):
		case <-r.Session.Done():
			return
		case <-s.closed:
			return
		}
	}
	switch {
	case act.Disconnect:
		r.Session.Kick()
		return
	case act.Drop && !act.LoseResponse:
		select {
		case <-r.Session.Done():
		case <-s.closed:
		}
		return
	case act.Status != smpp.StatusOK:
		_ = w.WriteFrame(smpp.SubmitResp(act.Status, r.Header.Sequence, ""))
		return
	}
	idn := s.next.Add(1)
	id := strconv.FormatUint(idn, 10)
	if s.cfg.HexIDs {
		id = strconv.FormatUint(idn, 16)
	}
	s.mu.Lock()
	s.accepted[key]++
	if sub.RegisteredDelivery&0x03 != 0 {
		s.messages[id] = newMessage(sub, r.Session.Account())
	}
	s.mu.Unlock()
	if act.LoseResponse {
		s.autoReceipt(sub, id)
		select {
		case <-r.Session.Done():
		case <-s.closed:
		}
		return
	}
	_ = w.WriteFrame(smpp.SubmitResp(smpp.StatusOK, r.Header.Sequence, id))
	s.autoReceipt(sub, id)
}
