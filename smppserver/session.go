package smppserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linxGnu/gosmpp/pdu"
	"github.com/smppproxy/smppproxy/smpp"
)

// Session is one ESME connection. A reader goroutine decodes requests and
// dispatches them (handlers run concurrently up to the window); a writer
// goroutine alone owns the buffered socket writer, drains its bounded queue,
// flushes, and sends enquire_link when the link is idle.
type Session struct {
	srv         *Server
	conn        net.Conn
	id          string
	connectedAt time.Time

	mu        sync.Mutex
	bindType  smpp.BindType
	announced bool // bind_resp queued: visible to ReceiversOf
	principal *Principal
	boundAt   time.Time
	draining  bool
	unbinding bool // the client asked to unbind (unbindAsked)
	// bindExpired is set by the bind timer; a bind completing afterwards
	// is dropped (the session is closing with ReasonBindTimeout).
	bindExpired bool
	closed      bool
	reason      CloseReason

	out       chan outFrame
	done      chan struct{}
	closeOnce sync.Once
	handlers  sync.WaitGroup
	// work hands a request to a parked handler goroutine of this session
	// (unbuffered: a send succeeds only if one is waiting); workers counts
	// them, so run can wait for them after close.
	work    chan *exchange
	workers sync.WaitGroup
	sem     chan struct{}
	// answers holds a token per request from its admission until its
	// answer is queued (sem's is given back before, see WriteFrame): the
	// reader takes one before it admits a request, so a client that does
	// not read, whose answers wait for room in out, stops being read
	// rather than getting a handler per request it sends.
	answers chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc

	seq       atomic.Uint32
	pendMu    sync.Mutex
	pending   map[uint32]chan []byte
	lastRead  atomic.Int64
	lastWrite atomic.Int64
	requests  atomic.Uint64
	inflight  atomic.Int64
}

type outFrame struct {
	b          []byte
	closeAfter CloseReason // non-zero: close the session once this frame is flushed
}

func newSession(srv *Server, c net.Conn) *Session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		srv:         srv,
		conn:        c,
		id:          fmt.Sprintf("esme-%d", srv.nextID.Add(1)),
		connectedAt: time.Now(),
		out:         make(chan outFrame, 64),
		done:        make(chan struct{}),
		pending:     make(map[uint32]chan []byte),
		work:        make(chan *exchange),
		ctx:         ctx,
		cancel:      cancel,
	}
	now := time.Now().UnixNano()
	s.lastRead.Store(now)
	s.lastWrite.Store(now)
	return s
}

// ID is the session's identifier, unique within the server's lifetime.
func (s *Session) ID() string { return s.id }

// RemoteAddr is the ESME's address.
func (s *Session) RemoteAddr() net.Addr { return s.conn.RemoteAddr() }

// Principal is the authenticated account, nil before bind.
func (s *Session) Principal() *Principal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.principal
}

// Account is the bound account's name ("" before bind).
func (s *Session) Account() string {
	if p := s.Principal(); p != nil {
		return p.Account
	}
	return ""
}

// BindType is the session's bind (smpp.BindNone until bound).
func (s *Session) BindType() smpp.BindType {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bindType
}

// BoundAt is when the bind succeeded.
func (s *Session) BoundAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boundAt
}

// InFlight is the number of requests being handled.
func (s *Session) InFlight() int { return int(s.inflight.Load()) }

// Requests is the number of requests handed to the handler so far.
func (s *Session) Requests() uint64 { return s.requests.Load() }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// CloseReason is why the session ended (ReasonNone while it lives).
func (s *Session) CloseReason() CloseReason {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// Kick closes the session at once.
func (s *Session) Kick() { s.close(ReasonKicked) }

func (s *Session) isClosing() bool {
	select {
	case <-s.done:
		return true
	default:
	}
	return s.isDraining()
}

func (s *Session) run() {
	if !s.srv.track(s) {
		_ = s.conn.Close()
		return
	}
	log := s.srv.logger()
	log.Debug("esme connected", "session", s.id, "remote", s.conn.RemoteAddr().String())
	bindTimer := time.AfterFunc(s.srv.bindTimeout(), func() {
		s.mu.Lock()
		expired := s.bindType == smpp.BindNone
		if expired {
			s.bindExpired = true
		}
		s.mu.Unlock()
		if expired {
			s.close(ReasonBindTimeout)
		}
	})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		s.writeLoop()
	}()
	reason := s.readLoop()
	bindTimer.Stop()
	s.close(reason)
	// The reader, which reports the bind, has returned: the down call
	// cannot overtake the up call.
	if s.isAnnounced() && s.srv.OnClosed != nil {
		s.srv.OnClosed(s)
	}
	<-writerDone
	s.handlers.Wait()
	s.workers.Wait()
	if s.Principal() == nil {
		// Never bound: a refused bind was logged (rate-limited) already,
		// and a line per connection would let any client flood the log.
		log.Debug("esme session closed", "session", s.id, "reason", s.CloseReason())
		return
	}
	log.Info("esme session closed", "session", s.id, "account", s.Account(), "reason", s.CloseReason())
}

// readLoop reads and dispatches frames until the session ends. Until bind
// it reads the socket unbuffered and at most MaxUnboundPDUSize per PDU, so
// an idle unbound connection holds no read buffer; once bound (the bind is
// handled on this goroutine, and unbuffered reads never read past a frame)
// it reads through a buffer, up to MaxPDUSize per PDU.
func (s *Session) readLoop() CloseReason {
	var r io.Reader = s.conn
	var br *bufio.Reader
	idle := 3 * s.srv.enquireLink()
	for {
		limit := s.srv.maxPDU()
		if s.BindType() == smpp.BindNone {
			limit = min(limit, MaxUnboundPDUSize)
			_ = s.conn.SetReadDeadline(s.connectedAt.Add(s.srv.bindTimeout()))
		} else {
			if br == nil {
				br = bufio.NewReaderSize(s.conn, boundBufSize)
				r = br
			}
			if !smpp.FrameBuffered(br) { // else no read: no deadline to move
				_ = s.conn.SetReadDeadline(time.Now().Add(idle))
			}
		}
		frame, err := smpp.ReadFrame(r, limit)
		if err != nil && s.isUnbinding() {
			// The client asked to unbind: the unbind_resp closed the
			// session, or the client hung up as soon as it had it.
			return ReasonUnbind
		}
		if err != nil {
			var le *smpp.LengthError
			var ne net.Error
			switch {
			case errors.As(err, &le):
				// Once per source address per minute, as bind refusals:
				// any client can send one per connection (from review).
				s.srv.warnBind(s.conn.RemoteAddr(), "invalid command_length; closing", "session", s.id, "remote", s.conn.RemoteAddr().String(), "length", le.Header.Length, "sequence", le.Header.Sequence)
				_ = s.enqueue(outFrame{b: smpp.GenericNack(smpp.StatusInvCmdLen, le.Header.Sequence), closeAfter: ReasonProtocolError})
				<-s.done
				return ReasonProtocolError
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
				if s.isDraining() {
					// We asked it to unbind (shutdown); it hung up as told.
					return ReasonServerShutdown
				}
				return ReasonClientClosed
			case errors.As(err, &ne) && ne.Timeout():
				if s.BindType() == smpp.BindNone {
					return ReasonBindTimeout
				}
				return ReasonIdleTimeout
			default:
				return ReasonReadError
			}
		}
		s.lastRead.Store(time.Now().UnixNano())
		if s.dispatch(frame) {
			// A refused bind's bind_resp closes the session once
			// written; the client may hang up as soon as it has it,
			// which must not read as a client that went away. Nothing
			// more is read: a bind pipelined behind it would cost
			// another password check (from review).
			<-s.done
			return ReasonBindFailed
		}
	}
}

// dispatch handles one inbound frame; refused reports a refused bind,
// whose response queued closes the session once written.
func (s *Session) dispatch(frame []byte) (refused bool) {
	h := smpp.ParseHeader(frame)
	if h.IsResponse() {
		s.pendMu.Lock()
		ch := s.pending[h.Sequence]
		delete(s.pending, h.Sequence)
		s.pendMu.Unlock()
		if ch != nil {
			ch <- frame
		}
		return
	}
	if !smpp.Known(h.ID) {
		_ = s.enqueue(outFrame{b: smpp.GenericNack(smpp.StatusInvCmdID, h.Sequence)})
		return
	}
	switch h.ID {
	case smpp.CmdEnquireLink:
		_ = s.enqueue(outFrame{b: smpp.EncodeSimple(smpp.CmdEnquireLink|smpp.RespBit, smpp.StatusOK, h.Sequence, nil)})
		return
	case smpp.CmdBindReceiver, smpp.CmdBindTransmitter, smpp.CmdBindTransceiver:
		return !s.handleBind(h, frame)
	case smpp.CmdUnbind:
		if s.BindType() == smpp.BindNone {
			_ = s.enqueue(outFrame{b: StatusResponse(h, smpp.StatusInvBndSts)})
			return
		}
		s.unbindAsked(h)
		return
	}
	bt := s.BindType()
	switch {
	case bt == smpp.BindNone:
		_ = s.enqueue(outFrame{b: StatusResponse(h, smpp.StatusInvBndSts)})
		return
	case (h.ID == smpp.CmdSubmitSM || h.ID == smpp.CmdSubmitMulti || h.ID == smpp.CmdDataSM) && !bt.CanTransmit():
		_ = s.enqueue(outFrame{b: StatusResponse(h, smpp.StatusInvBndSts)})
		return
	}
	if !s.admitRequest(h) {
		return
	}
	s.requests.Add(1)
	s.inflight.Add(1)
	x := &exchange{w: respWriter{s: s, h: h}, r: Request{Header: h, Frame: frame, Session: s}}
	select {
	case s.work <- x:
	default:
		s.workers.Add(1)
		go s.worker(x)
	}
	return
}

// admitRequest takes a window slot and an answer token for request h and
// counts it among the handlers; false when it was answered instead
// (window full: 0x58; draining: 0x08) or the session closed.
func (s *Session) admitRequest(h smpp.Header) bool {
	select {
	case s.sem <- struct{}{}:
	default:
		if f := s.srv.OnWindowFull; f != nil {
			f(s.Account())
		}
		_ = s.enqueue(outFrame{b: StatusResponse(h, smpp.StatusThrottled)})
		return false
	}
	select {
	case s.answers <- struct{}{}:
	default:
		if f := s.srv.readerWaits; f != nil {
			f()
		}
		select {
		case s.answers <- struct{}{}:
		case <-s.done:
			<-s.sem
			return false
		}
	}
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		<-s.sem
		<-s.answers
		_ = s.enqueue(outFrame{b: StatusResponse(h, smpp.StatusSysErr)})
		return false
	}
	s.handlers.Add(1)
	s.mu.Unlock()
	return true
}

// unbindAsked answers the ESME's unbind once the requests in flight are
// answered (at most the server's unbindWait): meanwhile the session takes
// no new request (0x08, as while draining), is not given new deliveries,
// and reads on, so that the ESME's answers to the deliver_sm sent before
// its unbind still count (SMPP lets it answer them until the
// unbind_resp). Before, the unbind_resp went out at once and closed the
// session under them, so a client that submits and unbinds straight away
// lost the answers; an untracked submit's retry was then a second message
// (from review).
func (s *Session) unbindAsked(h smpp.Header) {
	s.mu.Lock()
	again := s.unbinding
	s.draining, s.unbinding = true, true
	s.mu.Unlock()
	if again {
		// The first unbind's answer closes the session: a repeat starts
		// nothing (from review: each started two goroutines for up to
		// UnbindWait, 16 bytes of the client's each).
		return
	}
	resp := smpp.EncodeSimple(smpp.CmdUnbind|smpp.RespBit, smpp.StatusOK, h.Sequence, nil)
	go func() {
		answered := make(chan struct{})
		go func() {
			s.handlers.Wait()
			close(answered)
		}()
		t := time.NewTimer(s.srv.unbindWait())
		defer t.Stop()
		select {
		case <-answered:
		case <-t.C:
		case <-s.done:
			return
		}
		_ = s.enqueue(outFrame{b: resp, closeAfter: ReasonUnbind})
	}()
}

// workerIdle is how long a handler goroutine waits for the session's next
// request before it ends (Server.handlerIdle overrides it).
const workerIdle = time.Second

// worker serves x, then the session's next requests, until it has waited
// the server's idle time for one or the session closes. Handler goroutines are kept
// while requests keep coming rather than started per request: a request's
// handler runs deep (decide, store, forward), and a new goroutine would
// grow its stack again for every request. There are never more of them
// than the window, since each serves one request at a time and a request
// holds a window slot, and a session that goes quiet keeps none.
func (s *Session) worker(x *exchange) {
	defer s.workers.Done()
	wait := s.srv.idleHandler()
	idle := time.NewTimer(wait)
	defer idle.Stop()
	for {
		x.serve()
		idle.Reset(wait)
		select {
		case x = <-s.work:
		case <-idle.C:
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// exchange is a request being handled and its response writer, in one
// allocation.
type exchange struct {
	w respWriter
	r Request
}

// serve runs the handler for x (on its own goroutine).
func (x *exchange) serve() {
	s, h, w := x.r.Session, x.r.Header, &x.w
	defer func() {
		if v := recover(); v != nil {
			s.srv.panics.Add(1)
			s.srv.logger().Error("handler panic", "session", s.id, "sequence", h.Sequence, "panic", fmt.Sprint(v))
		}
		if !w.Written() {
			s.srv.unwritten.Add(1)
			_ = w.WriteStatus(smpp.StatusSysErr) // frees the window slot
		}
		s.handlers.Done()
	}()
	if s.srv.Handler == nil {
		_ = w.WriteStatus(smpp.StatusInvCmdID)
		return
	}
	s.srv.Handler.ServeSMPP(s.ctx, w, &x.r)
}

// handleBind answers a bind; ok is false when it was refused and the
// session closes once the bind_resp is written.
func (s *Session) handleBind(h smpp.Header, frame []byte) bool {
	log := s.srv.logger()
	if s.BindType() != smpp.BindNone {
		_ = s.enqueue(outFrame{b: s.bindResp(h, smpp.StatusAlyBnd, 0)})
		return true
	}
	p, err := smpp.Decode(frame)
	br, isBind := p.(*pdu.BindRequest)
	if err != nil || !isBind {
		s.srv.warnBind(s.conn.RemoteAddr(), "malformed bind; closing", "session", s.id, "sequence", h.Sequence)
		_ = s.enqueue(outFrame{b: s.bindResp(h, smpp.StatusBindFail, 0), closeAfter: ReasonBindFailed})
		return false
	}
	req := BindRequest{
		SystemID:         br.SystemID,
		Password:         br.Password,
		SystemType:       br.SystemType,
		InterfaceVersion: br.InterfaceVersion,
		Type:             smpp.BindTypeOf(h.ID),
		Remote:           s.conn.RemoteAddr(),
	}
	principal, status := s.authenticate(req)
	if status == smpp.StatusOK && principal == nil {
		status = smpp.StatusBindFail
	}
	if status == smpp.StatusOK && !s.srv.admit(principal) {
		s.srv.warnBind(req.Remote, "bind refused: max_binds reached", "session", s.id, "account", principal.Account)
		status = smpp.StatusBindFail
	} else if status != smpp.StatusOK {
		s.srv.warnBind(req.Remote, "bind refused", "session", s.id, "system_id", req.SystemID, "remote", req.Remote.String(), "status", status.String())
	}
	if status != smpp.StatusOK {
		_ = s.enqueue(outFrame{b: s.bindResp(h, status, 0), closeAfter: ReasonBindFailed})
		return false
	}
	win := principal.Window
	if win <= 0 {
		win = s.srv.window()
	}
	s.mu.Lock()
	if s.closed || s.bindExpired {
		// Closed (kicked, shut down, timed out) while authenticating:
		// close() saw no bind, so the slot is given back here.
		s.mu.Unlock()
		s.srv.release(principal)
		return true // closed already: the reader's next read ends
	}
	s.principal = principal
	s.bindType = req.Type
	s.boundAt = time.Now()
	s.sem = make(chan struct{}, win)
	s.answers = make(chan struct{}, win)
	s.mu.Unlock()
	log.Info("esme bound", "session", s.id, "account", principal.Account, "bind", req.Type.String(), "remote", req.Remote.String())
	// The bind_resp is queued before the session is announced (OnBound,
	// ReceiversOf), so nothing the server sends on it can overtake it.
	if s.enqueue(outFrame{b: s.bindResp(h, smpp.StatusOK, req.InterfaceVersion)}) != nil {
		return true
	}
	s.mu.Lock()
	s.announced = true
	s.mu.Unlock()
	if s.srv.OnBound != nil {
		s.srv.OnBound(s)
	}
	return true
}

// isAnnounced reports whether the bind_resp was queued (the session may
// receive server-originated requests).
func (s *Session) isAnnounced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.announced
}

// authenticate runs the Authenticator; a panic in it is recovered, counted
// and refuses the bind.
func (s *Session) authenticate(req BindRequest) (p *Principal, st smpp.Status) {
	if s.srv.Auth == nil {
		return &Principal{Account: req.SystemID}, smpp.StatusOK
	}
	defer func() {
		if v := recover(); v != nil {
			s.srv.panics.Add(1)
			s.srv.logger().Error("authenticator panic", "session", s.id, "system_id", req.SystemID, "panic", fmt.Sprint(v))
			p, st = nil, smpp.StatusBindFail
		}
	}()
	return s.srv.Auth.Authenticate(s.ctx, req)
}

func (s *Session) bindResp(h smpp.Header, status smpp.Status, version byte) []byte {
	body := append([]byte(s.srv.systemID()), 0)
	if status == smpp.StatusOK && version >= 0x34 {
		// sc_interface_version TLV
		body = append(body, 0x02, 0x10, 0x00, 0x01, 0x34)
	}
	return smpp.EncodeSimple(h.ID|smpp.RespBit, status, h.Sequence, body)
}

func (s *Session) enqueue(f outFrame) error {
	select {
	case <-s.done:
		return ErrSessionClosed
	default:
	}
	select {
	case s.out <- f:
		return nil
	case <-s.done:
		return ErrSessionClosed
	}
}

// boundBufSize is the size of a bound session's read and write buffers.
// Before bind the write buffer is unboundBufSize (bind_resp,
// enquire_link_resp and generic_nack are small) and there is no read buffer.
const (
	boundBufSize   = 16 << 10
	unboundBufSize = 256
)

func (s *Session) writeLoop() {
	var bw *bufio.Writer
	el := s.srv.enquireLink()
	tick := time.NewTicker(max(el/2, time.Millisecond))
	defer tick.Stop()
	for {
		var closeAfter CloseReason
		select {
		case <-s.done:
			return
		case f := <-s.out:
			var ok bool
			if bw, closeAfter, ok = s.writeQueued(bw, f); !ok {
				return
			}
		case <-tick.C:
			if s.BindType() == smpp.BindNone {
				continue
			}
			last := max(s.lastRead.Load(), s.lastWrite.Load())
			if time.Since(time.Unix(0, last)) < el {
				continue
			}
			var ok bool
			if bw, ok = s.writeFrame(bw, smpp.EncodeSimple(smpp.CmdEnquireLink, smpp.StatusOK, s.nextSeq(), nil)); !ok {
				return
			}
		}
		_ = s.conn.SetWriteDeadline(time.Now().Add(s.srv.writeTimeout()))
		if err := bw.Flush(); err != nil {
			s.close(ReasonWriteError)
			return
		}
		s.lastWrite.Store(time.Now().UnixNano())
		if closeAfter != ReasonNone {
			s.close(closeAfter)
			return
		}
	}
}

// writeQueued buffers f and every frame queued behind it, up to one that
// closes the session after it (whose reason it returns), so that the
// caller flushes them with one write (bw flushes by itself when full).
// When the queue runs dry it yields once and looks again: the handlers
// about to answer get to queue their frames first. false: the session is
// closing.
func (s *Session) writeQueued(bw *bufio.Writer, f outFrame) (*bufio.Writer, CloseReason, bool) {
	yielded := false
	for {
		var ok bool
		if bw, ok = s.writeFrame(bw, f.b); !ok {
			return bw, ReasonNone, false
		}
		if f.closeAfter != ReasonNone {
			return bw, f.closeAfter, true
		}
		select {
		case f = <-s.out:
			continue
		default:
		}
		if yielded {
			return bw, ReasonNone, true
		}
		yielded = true
		runtime.Gosched()
		select {
		case f = <-s.out:
		default:
			return bw, ReasonNone, true
		}
	}
}

// writeFrame buffers b (with the buffer writeBuffer gives); false, the
// session closed, when a write to the socket failed.
func (s *Session) writeFrame(bw *bufio.Writer, b []byte) (*bufio.Writer, bool) {
	bw = s.writeBuffer(bw)
	if len(b) > bw.Available() {
		// Write sends to the socket: the deadline must be fresh for it,
		// not the one left by the last flush.
		_ = s.conn.SetWriteDeadline(time.Now().Add(s.srv.writeTimeout()))
	}
	if _, err := bw.Write(b); err != nil {
		s.close(ReasonWriteError)
		return bw, false
	}
	return bw, true
}

// writeBuffer returns the writer to use: bw, made on the first write
// (small before bind) and replaced by a full-size one once the session is
// bound and bw is empty.
func (s *Session) writeBuffer(bw *bufio.Writer) *bufio.Writer {
	switch {
	case bw == nil && s.BindType() == smpp.BindNone:
		return bufio.NewWriterSize(s.conn, unboundBufSize)
	case bw == nil:
		return bufio.NewWriterSize(s.conn, boundBufSize)
	case bw.Size() < boundBufSize && bw.Buffered() == 0 && s.BindType() != smpp.BindNone:
		return bufio.NewWriterSize(s.conn, boundBufSize)
	}
	return bw
}

func (s *Session) nextSeq() uint32 {
	for {
		v := s.seq.Add(1) & 0x7FFFFFFF
		if v != 0 {
			return v
		}
	}
}

// Send queues a request PDU (such as deliver_sm) for the ESME and returns
// as soon as the frame is in the session's write queue, without waiting
// for the response. body is the PDU body; the sequence number is the
// session's own. The write queue is written in order: requests queued by
// successive Send calls reach the ESME in call order, which lets a caller
// keep several requests in flight and still have them written in order.
//
// While the write queue is full, Send waits for room until ctx ends or the
// session closes, and then returns ctx.Err() or ErrSessionClosed, nothing
// queued and nothing left pending. A session already closed gives
// ErrSessionClosed (even with ctx ended too); a ctx already ended gives
// ctx.Err() without queueing anything.
//
// On success resp delivers the response frame once; it is buffered, so
// nobody needs to be reading it when the response comes. Nothing is ever
// delivered on resp if the session closes first: wait on Done as well.
// cancel forgets the pending request (a response arriving later is
// dropped); it is idempotent, and must be called once the response is no
// longer awaited, or the entry stays until a response comes.
func (s *Session) Send(ctx context.Context, id uint32, body []byte) (resp <-chan []byte, cancel func(), err error) {
	select {
	case <-s.done:
		return nil, nil, ErrSessionClosed
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	seq := s.nextSeq()
	ch := make(chan []byte, 1)
	// Registered before the frame is queued: the response may come as
	// soon as the writer has written it.
	s.pendMu.Lock()
	s.pending[seq] = ch
	s.pendMu.Unlock()
	cancel = func() {
		s.pendMu.Lock()
		// Only this request's own entry: after a wrap-around of the
		// sequence numbers the slot may belong to a newer request.
		if s.pending[seq] == ch {
			delete(s.pending, seq)
		}
		s.pendMu.Unlock()
	}
	select {
	case s.out <- outFrame{b: smpp.EncodeSimple(id, smpp.StatusOK, seq, body)}:
		return ch, cancel, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-s.done:
		err = ErrSessionClosed
	}
	cancel()
	return nil, nil, err
}

// Request sends a request PDU (such as deliver_sm) to the ESME and waits
// for its response frame: Send, then wait for the response until ctx ends
// (ctx.Err()) or the session closes (ErrSessionClosed). ctx bounds the
// whole call, queueing included (see Send). A response that arrives
// together with the end of ctx or of the session is still returned.
func (s *Session) Request(ctx context.Context, id uint32, body []byte) ([]byte, error) {
	ch, cancel, err := s.Send(ctx, id, body)
	if err != nil {
		return nil, err
	}
	defer cancel()
	return AwaitResponse(ctx, ch, s.done)
}

// AwaitResponse waits for the response frame of a request Send queued:
// until ctx ends (ctx.Err()) or done, the session's Done, is closed
// (ErrSessionClosed). A response that arrives together with either is
// still returned. Request is Send then AwaitResponse; a caller that must
// know when the request was queued calls the two itself.
func AwaitResponse(ctx context.Context, resp <-chan []byte, done <-chan struct{}) ([]byte, error) {
	var err error
	select {
	case f := <-resp:
		return f, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-done:
		err = ErrSessionClosed
	}
	select { // a response that came with the close or the deadline still counts
	case f := <-resp:
		return f, nil
	default:
		return nil, err
	}
}

// unbindGrace bounds how long a draining session waits for the ESME's
// unbind_resp once its requests in flight are answered.
const unbindGrace = time.Second

func (s *Session) isUnbinding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unbinding
}

func (s *Session) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// beginShutdown refuses new requests and, for a bound session, starts the
// drain; an unbound session is closed at once.
func (s *Session) beginShutdown() {
	s.mu.Lock()
	s.draining = true
	bound := s.bindType != smpp.BindNone
	s.mu.Unlock()
	if !bound {
		s.close(ReasonServerShutdown)
		return
	}
	go s.drain()
}

// drain sends unbind to the ESME, waits for the requests in flight to be
// answered and for the unbind_resp (at most unbindGrace), then closes once
// everything queued is flushed. The unbind is queued before anything else
// so that it always goes out before the close.
func (s *Session) drain() {
	resp, forget, err := s.Send(context.Background(), smpp.CmdUnbind, nil)
	s.handlers.Wait()
	if err != nil {
		return // already closed
	}
	defer forget()
	t := time.NewTimer(unbindGrace)
	defer t.Stop()
	select {
	case <-resp:
	case <-t.C:
	case <-s.done:
		return
	}
	_ = s.enqueue(outFrame{closeAfter: ReasonServerShutdown})
}

// close ends the session once: it records r, gives back the bind's
// max_binds slot (before the socket closes, so that a client reconnecting
// on EOF can bind again), cancels the context of the handlers in flight and
// closes the connection. OnClosed is told later, by run.
func (s *Session) close(r CloseReason) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.reason = r
		p := s.principal
		bound := s.bindType != smpp.BindNone
		s.mu.Unlock()
		if bound {
			s.srv.release(p)
		}
		if int(r) < len(s.srv.closedBy) {
			s.srv.closedBy[r].Add(1)
		}
		s.srv.untrack(s)
		s.cancel()
		close(s.done)
		_ = s.conn.Close()
	})
}

type respWriter struct {
	s       *Session
	h       smpp.Header
	written atomic.Bool
}

func (w *respWriter) WriteFrame(b []byte) error {
	if !w.written.CompareAndSwap(false, true) {
		return ErrAlreadyWritten
	}
	// The request's window slot is free from now on, before the answer can
	// reach the client: a client that keeps exactly its window outstanding
	// sends its next request as soon as it has this one's answer.
	w.s.inflight.Add(-1)
	<-w.s.sem
	err := w.s.enqueue(outFrame{b: b})
	<-w.s.answers
	return err
}

func (w *respWriter) WriteStatus(st smpp.Status) error {
	return w.WriteFrame(StatusResponse(w.h, st))
}

func (w *respWriter) Written() bool { return w.written.Load() }
