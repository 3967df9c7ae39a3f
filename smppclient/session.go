package smppclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linxGnu/gosmpp"

	"github.com/smppproxy/smppproxy/smpp"
)

// maxSeq is the largest sequence number; the next one is 1 again.
const maxSeq = 0x7FFFFFFF

// session is one bound connection: a reader goroutine, a writer goroutine
// that alone writes, and the requests pending a response.
type session struct {
	p    *Pool
	id   string
	bind smpp.BindType
	tx   bool
	log  *slog.Logger
	conn *gosmpp.Connection // set by connect, before start

	// Guarded by p.mu: what routing and Sessions look at.
	state         State
	inFlight      int
	pausedUntil   time.Time
	throttlePause time.Duration
	boundSince    time.Time
	lastErr       string

	mu      sync.Mutex
	seq     uint32
	pending map[uint32]*pending // nil once the session is torn down

	submits   atomic.Uint64
	lastRecv  atomic.Int64 // unix nanoseconds of the last frame received
	throttled atomic.Bool  // throttlePause is set

	writeq chan *writeReq
	// deliverSem holds a token per OnDeliver call running on this session
	// (besides the pool's): shutdown takes them all to refuse new
	// deliveries and wait for the running ones.
	deliverSem  chan struct{}
	dead        chan struct{} // closed by close
	writerDone  chan struct{} // closed when the writer drained its queue and left
	unbound     chan struct{} // closed when unbind_resp arrives
	unboundOnce sync.Once
	// drainOnce starts, and drained tells the end of, the taking of every
	// delivery slot (drainDeliveries).
	drainOnce sync.Once
	drained   chan struct{}
	closeOnce sync.Once
	reason    CloseReason // set before dead is closed
	// ending, once an unbind was sent or received, is the reason any
	// later close is recorded with (the peer may hang up first).
	ending atomic.Int32
	// peerUnbound is set by the SMSC's first unbind: only that one is
	// answered (its answer closes the session).
	peerUnbound atomic.Bool
	// answered is kicked when a pending request is removed while the
	// session unbinds (the SMSC's unbind waits for the answers of the
	// requests written).
	answered chan struct{}
	// respSent holds, per seq%respSlots, the sequence number of the
	// latest response sent (high 32 bits) and when (Unix seconds).
	respSent [respSlots]atomic.Uint64
	closeErr error
	ctx      context.Context // cancelled by close; handed to OnDeliver
	cancel   context.CancelFunc
	wg       sync.WaitGroup // reader, writer and OnDeliver goroutines
}

// unbinding reports whether an unbind was sent or received: the session
// takes no more submits.
func (s *session) unbinding() bool { return s.ending.Load() != int32(ReasonNone) }

// pending is a request awaiting its response: cmd is its command id (0
// until its frame is built), which the response must answer; written is
// set by the writer just before the frame's write (a response that comes
// before cannot be this request's).
type pending struct {
	ch      chan result
	cmd     atomic.Uint32
	written atomic.Bool
}

type result struct {
	resp Response
	err  error
}

// writeReq is one frame for the writer. Submit's requests carry ctx and
// done; control frames (responses, enquire_link, unbind) carry neither.
// after, when set, closes the session once the frame is written (a nil
// frame just closes it after everything queued before).
type writeReq struct {
	frame []byte
	ctx   context.Context
	done  chan writeResult
	after CloseReason
	pd    *pending // Submit's requests: what waits for the response
}

type writeResult struct {
	n   int
	err error
}

func newSession(p *Pool, id string, bind smpp.BindType) *session {
	w := p.cfg.Window
	s := &session{
		p: p, id: id, bind: bind, tx: bind != smpp.BindReceiver,
		log:        p.log.With("session", id),
		state:      StateConnecting,
		pending:    make(map[uint32]*pending),
		writeq:     make(chan *writeReq, 2*w+8),
		deliverSem: make(chan struct{}, p.cfg.DeliverWindow),
		drained:    make(chan struct{}),
		dead:       make(chan struct{}),
		writerDone: make(chan struct{}),
		unbound:    make(chan struct{}),
		answered:   make(chan struct{}, 1),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// connect dials and binds with gosmpp. ConnectTimeout covers the dial, the
// TLS handshake and the bind exchange; ctx aborts all of them.
func (s *session) connect(ctx context.Context) error {
	cfg := &s.p.cfg
	var stop func() bool
	var raw net.Conn     // what dial opened: closed here if gosmpp panics
	var seen *firstBytes // what the peer sent first, to explain a failed bind
	dial := func(addr string) (net.Conn, error) {
		d := &net.Dialer{Timeout: cfg.ConnectTimeout}
		var c net.Conn
		var err error
		if cfg.TLS != nil {
			c, err = (&tls.Dialer{NetDialer: d, Config: cfg.TLS}).DialContext(ctx, "tcp", addr)
		} else {
			c, err = d.DialContext(ctx, "tcp", addr)
		}
		if err != nil {
			return nil, err
		}
		_ = c.SetDeadline(time.Now().Add(cfg.ConnectTimeout))
		dialed := c
		stop = context.AfterFunc(ctx, func() { _ = dialed.Close() })
		raw = dialed
		seen = &firstBytes{Conn: dialed}
		var out net.Conn = seen
		if s.p.wrapConn != nil {
			out = s.p.wrapConn(out)
		}
		return out, nil
	}
	auth := gosmpp.Auth{SMSC: cfg.Address, SystemID: cfg.SystemID, Password: cfg.Password, SystemType: cfg.SystemType}
	var connector gosmpp.Connector
	switch s.bind {
	case smpp.BindTransceiver:
		connector = gosmpp.TRXConnector(dial, auth)
	case smpp.BindTransmitter:
		connector = gosmpp.TXConnector(dial, auth)
	case smpp.BindReceiver:
		connector = gosmpp.RXConnector(dial, auth)
	default:
		return fmt.Errorf("smppclient: unknown bind type %v", s.bind)
	}
	// gosmpp decodes the SMSC's answers to the bind itself; a PDU it panics
	// on must fail this bind, not the process.
	var conn *gosmpp.Connection
	err := smpp.Guard(func() (e error) {
		conn, e = connector.Connect()
		return e
	})
	if errors.Is(err, smpp.ErrUndecodable) && raw != nil {
		_ = raw.Close()
	}
	if stop != nil {
		stop()
	}
	if ctx.Err() != nil {
		if err == nil {
			_ = conn.Close()
		}
		return ctx.Err()
	}
	if err != nil {
		var be gosmpp.BindError
		if errors.As(err, &be) {
			return fmt.Errorf("smppclient: bind refused: %w", smpp.Status(be.CommandStatus))
		}
		if why := seen.explain(); why != "" {
			return fmt.Errorf("smppclient: bind: %s (%w)", why, err)
		}
		return fmt.Errorf("smppclient: bind: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	s.conn = conn
	return nil
}

// firstBytes is a connection that keeps the first bytes the peer sent.
type firstBytes struct {
	net.Conn
	full atomic.Bool // buf holds all it keeps: later reads pass straight through
	mu   sync.Mutex
	buf  []byte
}

func (f *firstBytes) Read(b []byte) (int, error) {
	n, err := f.Conn.Read(b)
	if n > 0 && !f.full.Load() {
		f.mu.Lock()
		if room := 16 - len(f.buf); room > 0 {
			f.buf = append(f.buf, b[:min(n, room)]...)
		}
		f.full.Store(len(f.buf) == 16)
		f.mu.Unlock()
	}
	return n, err
}

// explain says in an operator's words what the peer sent instead of a
// bind response, or "" when it looks like SMPP (or f is nil).
func (f *firstBytes) explain() string {
	if f == nil {
		return ""
	}
	f.mu.Lock()
	b := append([]byte(nil), f.buf...)
	f.mu.Unlock()
	switch {
	case len(b) == 0:
		return "the peer closed the connection or sent nothing in answer to the bind: is the address an SMPP port?"
	case bytes.HasPrefix(b, []byte("HTTP/")) || bytes.HasPrefix(b, []byte("<")):
		return "the peer answered like a web server, not an SMSC: the address is an HTTP port"
	case len(b) >= 8 && binary.BigEndian.Uint32(b[0:4]) >= 16 && binary.BigEndian.Uint32(b[4:8])&0x80000000 != 0:
		return "" // an SMPP response: gosmpp's own error says what was wrong with it
	}
	return fmt.Sprintf("the peer sent something that is not an SMPP response (first bytes % x): is the address an SMPP port?", b)
}

func (s *session) start() {
	s.lastRecv.Store(time.Now().UnixNano())
	s.wg.Add(2)
	go s.readLoop()
	go s.writeLoop()
}

// close closes the session once, for reason r.
func (s *session) close(r CloseReason, err error) {
	s.closeOnce.Do(func() {
		if e := CloseReason(s.ending.Load()); e != ReasonNone {
			r, err = e, nil
		}
		s.reason, s.closeErr = r, err
		msg := r.String()
		if err != nil {
			msg += ": " + err.Error()
		}
		// Out of routing first, so that no Submit picks it once dead.
		s.p.mu.Lock()
		s.state, s.boundSince, s.lastErr = StateClosed, time.Time{}, msg
		s.p.wakeLocked()
		s.p.mu.Unlock()
		s.cancel()
		if s.conn != nil {
			_ = s.conn.Close()
		}
		close(s.dead)
	})
}

// wait blocks until the session closed and its goroutines ended, then fails
// every pending request with ErrSessionLost and reports the loss.
func (s *session) wait() {
	<-s.dead
	s.wg.Wait()
	s.mu.Lock()
	lost := s.pending
	s.pending = nil
	s.mu.Unlock()
	for seq, pd := range lost {
		pd.ch <- result{resp: Response{Session: s.id, Sequence: seq}, err: ErrSessionLost}
	}
	s.p.stats.closed[s.reason].Add(1)
	lvl := slog.LevelWarn
	if s.reason == ReasonPoolClosed {
		lvl = slog.LevelInfo
	}
	s.log.Log(context.Background(), lvl, "session closed", "reason", s.reason, "err", s.closeErr, "pending_lost", len(lost))
	if f := s.p.cfg.OnSessionLost; f != nil {
		f(s.id)
	}
}

// shutdown unbinds politely: new deliveries are refused and the running
// ones answered, unbind is sent and unbind_resp awaited (UnbindWait), then
// the session closes once everything queued was written.
func (s *session) shutdown(ctx context.Context) {
	defer s.close(ReasonPoolClosed, nil)
	select {
	case <-s.drainDeliveries():
	case <-s.dead:
		return
	case <-ctx.Done():
		return
	}
	s.ending.Store(int32(ReasonPoolClosed))
	s.mu.Lock()
	seq := s.nextSeqLocked()
	s.mu.Unlock()
	if !s.send(smpp.EncodeSimple(smpp.CmdUnbind, smpp.StatusOK, seq, nil), ReasonNone) {
		return
	}
	t := time.NewTimer(s.p.cfg.UnbindWait)
	defer t.Stop()
	select {
	case <-s.unbound:
	case <-s.dead:
	case <-t.C:
	case <-ctx.Done():
		return
	}
	if s.send(nil, ReasonPoolClosed) {
		t.Reset(s.p.cfg.UnbindWait)
		select {
		case <-s.dead:
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// nextSeqLocked returns the next free sequence number: 1, 2, …,
// 0x7FFFFFFF, 1, … skipping any still pending. s.mu must be held.
func (s *session) nextSeqLocked() uint32 {
	for {
		s.seq++
		if s.seq > maxSeq || s.seq == 0 {
			s.seq = 1
		}
		if _, busy := s.pending[s.seq]; !busy {
			return s.seq
		}
	}
}

// forget drops a pending request; false means its result was or is being
// delivered on its channel.
func (s *session) forget(seq uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pending[seq]; ok {
		delete(s.pending, seq)
		s.kickAnswered()
		return true
	}
	return false
}

// kickAnswered tells the wait of the SMSC's unbind, if any, that a pending
// request was removed.
func (s *session) kickAnswered() {
	if !s.unbinding() {
		return
	}
	select {
	case s.answered <- struct{}{}:
	default:
	}
}

// writtenAnswered reports whether every request written has its answer
// (or was given up: its timeout).
func (s *session) writtenAnswered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pd := range s.pending {
		if pd.written.Load() {
			return false
		}
	}
	return true
}
