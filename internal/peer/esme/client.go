// Package esme is a small SMPP client (an ESME) for tools and tests: the
// demo, the load generator and protocol tests of the proxy.
//
// Unlike a production client it gives raw control: sequence numbers may be
// chosen by the caller (a retry can reuse one, a test can collide two),
// arbitrary frames can be written with SendRaw, and in Raw mode every frame
// the client does not correlate itself is handed to ReadRaw instead of
// being answered. Otherwise it behaves as a well-mannered ESME: one reader
// and one writer goroutine per connection, responses correlated by
// sequence number, an optional window of outstanding submits, enquire_link
// and unbind answered, deliver_sm answered and handed to Receipts.
//
// A Client is safe for concurrent use.
package esme

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// Errors returned by a Client. Compare with errors.Is.
var (
	// ErrClosed: the connection is closed (by Close, Unbind, the peer or an
	// I/O error; Err says which). Pending requests fail with it.
	ErrClosed = errors.New("esme: connection closed")
	// ErrTimeout: no response within Options.Timeout or the context's
	// deadline. The request may still have been processed by the peer; a
	// response arriving later is counted in Stats.Late (and handed to
	// ReadRaw in Raw mode).
	ErrTimeout = errors.New("esme: response timeout")
	// ErrSeqInUse: a request with this sequence number is still pending.
	ErrSeqInUse = errors.New("esme: sequence number already pending")
	// ErrNotRaw: ReadRaw needs Options.Raw.
	ErrNotRaw = errors.New("esme: ReadRaw needs Options.Raw")
	// ErrUnbound: the peer sent unbind; it was answered and the connection
	// closed.
	ErrUnbound = errors.New("esme: unbound by the peer")
)

// Defaults applied to zero Options fields.
const (
	DefaultTimeout       = 10 * time.Second
	DefaultReceiptBuffer = 1024
	DefaultRawBuffer     = 1024
)

// Options configure Dial. Zero values are usable (an anonymous transceiver
// bind with a 10s timeout).
type Options struct {
	SystemID, Password, SystemType string
	// Bind is the bind type (default smpp.BindTransceiver when
	// smpp.BindNone).
	Bind smpp.BindType
	// InterfaceVersion sent in the bind (default 0x34).
	InterfaceVersion byte
	// Timeout bounds the connect and bind together, each request's wait for
	// its response, and each flush to the socket (default 10s). A context
	// with an earlier deadline wins.
	Timeout time.Duration
	// TLS, when set, wraps the connection in TLS.
	TLS *tls.Config
	// Window is the number of submits that may be outstanding at once;
	// Submit and SubmitAsync wait for a free slot. 0 = unlimited. Requests
	// sent with Request, Do and SendRaw are not windowed.
	Window int
	// NoBind makes Dial only connect; call Bind yourself (protocol tests of
	// the unbound state).
	NoBind bool
	// Raw: nothing is answered automatically (no enquire_link_resp, no
	// deliver_sm_resp, no unbind_resp) and every inbound frame that is not
	// the response to a pending request goes to ReadRaw. The reader blocks
	// when ReadRaw is not called and its buffer (1024 frames) is full.
	Raw bool
	// ManualDeliverResp: deliver_sm are handed to Receipts unanswered;
	// answer them with AckDeliver. Default: answered ESME_ROK once queued.
	ManualDeliverResp bool
	// ReceiptBuffer is the capacity of the Receipts channel (default 1024).
	// A deliver_sm arriving while it is full is answered ESME_RTHROTTLED
	// (the SMSC redelivers) and counted in Stats.Refused.
	ReceiptBuffer int
	// MaxPDUSize bounds inbound command_length (default 64 KiB).
	MaxPDUSize int
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.InterfaceVersion == 0 {
		o.InterfaceVersion = 0x34
	}
	if o.ReceiptBuffer <= 0 {
		o.ReceiptBuffer = DefaultReceiptBuffer
	}
	return o
}

func bindCommand(b smpp.BindType) (uint32, error) {
	if b == smpp.BindNone {
		b = smpp.BindTransceiver
	}
	if cmd := b.Command(); cmd != 0 {
		return cmd, nil
	}
	return 0, fmt.Errorf("esme: unknown bind type %v", b)
}

// Stats are counters of one Client.
type Stats struct {
	// Late counts responses that matched no pending request: answers
	// that came after ErrTimeout, and answers to frames sent with SendRaw.
	Late uint64
	// Refused counts deliver_sm answered ESME_RTHROTTLED because the
	// Receipts buffer was full.
	Refused uint64
}

// Client is one SMPP connection.
type Client struct {
	opts     Options
	conn     net.Conn
	out      chan outFrame
	done     chan struct{}
	wg       sync.WaitGroup
	sem      chan struct{} // window; nil = unlimited
	receipts chan Deliver
	raw      chan []byte

	mu       sync.Mutex
	pending  map[uint32]*call
	seq      uint32
	err      error // why the connection closed; nil while open
	serverID string

	closeOnce sync.Once
	late      atomic.Uint64
	refused   atomic.Uint64
}

type outFrame struct {
	b []byte
	// closeAfter, when set, closes the connection with this reason once
	// the frame is flushed.
	closeAfter error
}

type call struct {
	seq  uint32
	ch   chan reply
	slot bool // holds a window slot
}

type reply struct {
	frame []byte
	err   error
}

// Dial connects to addr and, unless opts.NoBind, binds. A refused bind
// returns an error that wraps the bind_resp status (errors.As with
// *smpp.Status, or errors.Is with the status value).
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	if _, err := bindCommand(opts.Bind); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	var conn net.Conn
	var err error
	if opts.TLS != nil {
		d := &tls.Dialer{Config: opts.TLS}
		conn, err = d.DialContext(dctx, "tcp", addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(dctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("esme: dial %s: %w", addr, err)
	}
	c := newClient(conn, opts)
	if !opts.NoBind {
		if err := c.Bind(dctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// NewClient runs a Client over an established connection (net.Pipe in
// tests, a custom dialer) without binding.
func NewClient(conn net.Conn, opts Options) *Client { return newClient(conn, opts.withDefaults()) }

func newClient(conn net.Conn, opts Options) *Client {
	c := &Client{
		opts:     opts,
		conn:     conn,
		out:      make(chan outFrame, 256),
		done:     make(chan struct{}),
		receipts: make(chan Deliver, opts.ReceiptBuffer),
		pending:  make(map[uint32]*call),
	}
	if opts.Window > 0 {
		c.sem = make(chan struct{}, opts.Window)
	}
	if opts.Raw {
		c.raw = make(chan []byte, DefaultRawBuffer)
	}
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return c
}

// Bind sends the bind of Options.Bind and waits for its response. Dial
// calls it unless Options.NoBind.
func (c *Client) Bind(ctx context.Context) error {
	cmd, err := bindCommand(c.opts.Bind)
	if err != nil {
		return err
	}
	o := c.opts
	body := cstr(nil, o.SystemID)
	body = cstr(body, o.Password)
	body = cstr(body, o.SystemType)
	body = append(body, o.InterfaceVersion, 0, 0, 0) // version, addr_ton, addr_npi, address_range ""
	resp, err := c.Request(ctx, cmd, body)
	if err != nil {
		return fmt.Errorf("esme: bind: %w", err)
	}
	h := smpp.ParseHeader(resp)
	if h.Status != smpp.StatusOK {
		return fmt.Errorf("esme: bind as %q refused: %w", o.SystemID, h.Status)
	}
	if h.ID != cmd|smpp.RespBit {
		return fmt.Errorf("esme: bind: unexpected response 0x%08X", h.ID)
	}
	id, _, _ := cutCString(resp[smpp.HeaderLen:])
	c.mu.Lock()
	c.serverID = string(id)
	c.mu.Unlock()
	return nil
}

// ServerSystemID is the system_id the peer sent in its bind response.
func (c *Client) ServerSystemID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.serverID
}

// LocalAddr is the client side of the connection.
func (c *Client) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// Stats returns the client's counters.
func (c *Client) Stats() Stats { return Stats{Late: c.late.Load(), Refused: c.refused.Load()} }

// Done is closed when the connection is closed.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the connection closed (wrapping ErrClosed), nil while open.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Receipts delivers every deliver_sm received (delivery receipts and MO),
// decoded. It is closed when the connection closes.
func (c *Client) Receipts() <-chan Deliver { return c.receipts }

// Request sends a request PDU with the next free sequence number and body,
// and waits for the response (or a generic_nack) carrying that sequence
// number. The whole response frame is returned whatever its status.
func (c *Client) Request(ctx context.Context, id uint32, body []byte) ([]byte, error) {
	cl, err := c.start(ctx, 0, false, func(seq uint32) []byte {
		return smpp.EncodeSimple(id, smpp.StatusOK, seq, body)
	})
	if err != nil {
		return nil, err
	}
	return c.wait(ctx, cl)
}

// Do writes frame as it is and waits for the response carrying the
// frame's own sequence number (the header must be complete).
func (c *Client) Do(ctx context.Context, frame []byte) ([]byte, error) {
	if len(frame) < smpp.HeaderLen {
		return nil, fmt.Errorf("esme: frame of %d bytes has no header", len(frame))
	}
	seq := smpp.ParseHeader(frame).Sequence
	if seq == 0 {
		return nil, errors.New("esme: Do needs a frame with a sequence number")
	}
	cl, err := c.start(ctx, seq, false, func(uint32) []byte { return frame })
	if err != nil {
		return nil, err
	}
	return c.wait(ctx, cl)
}

// SendRaw writes b as it is (it may be malformed or several PDUs) without
// waiting for anything. Answers arrive on ReadRaw in Raw mode.
func (c *Client) SendRaw(b []byte) error {
	if err := c.closedErr(); err != nil {
		return err
	}
	return c.enqueue(outFrame{b: b})
}

// ReadRaw returns the next inbound frame the client did not consume itself
// (Raw mode only): requests from the peer and responses that match no
// pending request.
func (c *Client) ReadRaw(ctx context.Context) ([]byte, error) {
	if c.raw == nil {
		return nil, ErrNotRaw
	}
	select {
	case f, ok := <-c.raw:
		if !ok {
			return nil, c.closedErr()
		}
		return f, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// EnquireLink sends enquire_link and waits for a successful answer.
func (c *Client) EnquireLink(ctx context.Context) error {
	resp, err := c.Request(ctx, smpp.CmdEnquireLink, nil)
	if err != nil {
		return err
	}
	if st := smpp.ParseHeader(resp).Status; st != smpp.StatusOK {
		return fmt.Errorf("esme: enquire_link: %w", st)
	}
	return nil
}

// AckDeliver answers a deliver_sm (Options.ManualDeliverResp) with status.
func (c *Client) AckDeliver(seq uint32, status smpp.Status) error {
	return c.enqueue(outFrame{b: smpp.EncodeSimple(smpp.CmdDeliverSM|smpp.RespBit, status, seq, []byte{0})})
}

// Unbind sends unbind, waits for unbind_resp and closes the connection.
func (c *Client) Unbind(ctx context.Context) error {
	resp, err := c.Request(ctx, smpp.CmdUnbind, nil)
	c.Close()
	if err != nil {
		return fmt.Errorf("esme: unbind: %w", err)
	}
	if st := smpp.ParseHeader(resp).Status; st != smpp.StatusOK {
		return fmt.Errorf("esme: unbind: %w", st)
	}
	return nil
}

// Close closes the connection at once (no unbind: what a crash or a
// network failure looks like to the peer) and waits for the client's
// goroutines. Pending requests fail with ErrClosed. Close is idempotent.
func (c *Client) Close() {
	c.shutdown(ErrClosed)
	c.wg.Wait()
}

// shutdown closes the connection with reason; safe from any goroutine.
func (c *Client) shutdown(reason error) {
	c.closeOnce.Do(func() {
		if !errors.Is(reason, ErrClosed) {
			reason = fmt.Errorf("%w: %w", ErrClosed, reason)
		}
		c.mu.Lock()
		c.err = reason
		for seq, cl := range c.pending {
			cl.ch <- reply{err: reason}
			delete(c.pending, seq)
		}
		c.mu.Unlock()
		close(c.done)
		_ = c.conn.Close()
	})
}

func (c *Client) closedErr() error {
	select {
	case <-c.done:
		return c.Err()
	default:
		return nil
	}
}

func (c *Client) enqueue(f outFrame) error {
	select {
	case <-c.done:
		return c.Err()
	default:
	}
	select {
	case c.out <- f:
		return nil
	case <-c.done:
		return c.Err()
	}
}

// start takes a window slot when windowed, registers a pending call under
// seq (0 = the next free sequence number) and queues build(seq).
func (c *Client) start(ctx context.Context, seq uint32, windowed bool, build func(seq uint32) []byte) (*call, error) {
	slot := windowed && c.sem != nil
	if slot {
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, c.Err()
		}
	}
	release := func() {
		if slot {
			<-c.sem
		}
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		release()
		return nil, err
	}
	if seq == 0 {
		seq = c.nextSeqLocked()
	} else if _, busy := c.pending[seq]; busy {
		c.mu.Unlock()
		release()
		return nil, fmt.Errorf("%w: %d", ErrSeqInUse, seq)
	}
	cl := &call{seq: seq, ch: make(chan reply, 1), slot: slot}
	c.pending[seq] = cl
	c.mu.Unlock()
	if err := c.enqueue(outFrame{b: build(seq)}); err != nil {
		c.forget(cl)
		release()
		return nil, err
	}
	return cl, nil
}

// nextSeqLocked returns the next sequence number in 1..0x7FFFFFFF that is
// not pending.
func (c *Client) nextSeqLocked() uint32 {
	for {
		c.seq++
		if c.seq > 0x7FFFFFFF {
			c.seq = 1
		}
		if _, busy := c.pending[c.seq]; !busy {
			return c.seq
		}
	}
}

// forget removes cl from the pending calls; false means its reply was or
// is being delivered.
func (c *Client) forget(cl *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[cl.seq] == cl {
		delete(c.pending, cl.seq)
		return true
	}
	return false
}

// wait waits for cl's reply within Options.Timeout and ctx, and frees its
// window slot.
func (c *Client) wait(ctx context.Context, cl *call) ([]byte, error) {
	defer func() {
		if cl.slot {
			<-c.sem
		}
	}()
	t := smpp.AcquireTimer(c.opts.Timeout)
	defer smpp.ReleaseTimer(t)
	var giveUp error
	select {
	case r := <-cl.ch:
		return r.frame, r.err
	case <-t.C:
		giveUp = fmt.Errorf("%w: sequence %d after %v", ErrTimeout, cl.seq, c.opts.Timeout)
	case <-ctx.Done():
		giveUp = fmt.Errorf("esme: sequence %d: %w", cl.seq, ctx.Err())
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			giveUp = fmt.Errorf("%w: sequence %d: %w", ErrTimeout, cl.seq, ctx.Err())
		}
	}
	if c.forget(cl) {
		return nil, giveUp
	}
	r := <-cl.ch // the reply won the race
	return r.frame, r.err
}

// complete hands a response to its pending call.
func (c *Client) complete(seq uint32, frame []byte) bool {
	c.mu.Lock()
	cl := c.pending[seq]
	delete(c.pending, seq)
	c.mu.Unlock()
	if cl == nil {
		return false
	}
	cl.ch <- reply{frame: frame}
	return true
}

func (c *Client) writeLoop() {
	defer c.wg.Done()
	bw := bufio.NewWriterSize(c.conn, 16<<10)
	for {
		var f outFrame
		select {
		case <-c.done:
			return
		case f = <-c.out:
		}
		_ = c.conn.SetWriteDeadline(time.Now().Add(c.opts.Timeout))
		f, err := c.writeQueued(bw, f)
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			c.shutdown(fmt.Errorf("esme: write: %w", err))
			return
		}
		if f.closeAfter != nil {
			c.shutdown(f.closeAfter)
			return
		}
	}
}

// writeQueued buffers f and every frame queued behind it, up to one that
// closes the connection after it, which it returns: the caller flushes
// them with one write (bw writes by itself when full). When the queue runs
// dry it yields once and looks again, so that the senders about to queue
// a frame can.
func (c *Client) writeQueued(bw *bufio.Writer, f outFrame) (outFrame, error) {
	yielded := false
	for {
		if _, err := bw.Write(f.b); err != nil || f.closeAfter != nil {
			return f, err
		}
		select {
		case f = <-c.out:
			continue
		default:
		}
		if yielded {
			return f, nil
		}
		yielded = true
		runtime.Gosched()
		select {
		case f = <-c.out:
		default:
			return f, nil
		}
	}
}

func (c *Client) readLoop() {
	defer c.wg.Done()
	defer func() {
		close(c.receipts)
		if c.raw != nil {
			close(c.raw)
		}
	}()
	br := bufio.NewReaderSize(c.conn, 16<<10)
	for {
		frame, err := smpp.ReadFrame(br, c.opts.MaxPDUSize)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("esme: connection closed by the peer")
			} else {
				err = fmt.Errorf("esme: read: %w", err)
			}
			c.shutdown(err)
			return
		}
		c.dispatch(frame)
	}
}

func (c *Client) dispatch(frame []byte) {
	h := smpp.ParseHeader(frame)
	if h.IsResponse() {
		if c.complete(h.Sequence, frame) {
			return
		}
		c.late.Add(1)
		c.pushRaw(frame)
		return
	}
	if c.opts.Raw {
		c.pushRaw(frame)
		return
	}
	switch h.ID {
	case smpp.CmdEnquireLink:
		_ = c.enqueue(outFrame{b: smpp.EncodeSimple(smpp.CmdEnquireLink|smpp.RespBit, smpp.StatusOK, h.Sequence, nil)})
	case smpp.CmdUnbind:
		_ = c.enqueue(outFrame{b: smpp.EncodeSimple(smpp.CmdUnbind|smpp.RespBit, smpp.StatusOK, h.Sequence, nil), closeAfter: ErrUnbound})
	case smpp.CmdDeliverSM:
		c.onDeliver(h, frame)
	case smpp.CmdAlertNotif, smpp.CmdOutbind:
		// No response exists; nothing to do for a tool.
	default:
		_ = c.enqueue(outFrame{b: smpp.GenericNack(smpp.StatusInvCmdID, h.Sequence)})
	}
}

func (c *Client) pushRaw(frame []byte) {
	if c.raw == nil {
		return
	}
	select {
	case c.raw <- frame:
	case <-c.done:
	}
}

func (c *Client) onDeliver(h smpp.Header, frame []byte) {
	d, err := parseDeliver(frame)
	if err != nil {
		st := smpp.StatusSysErr
		var fe *smpp.FieldError
		if errors.As(err, &fe) {
			st = fe.Status
		}
		_ = c.AckDeliver(h.Sequence, st)
		return
	}
	select {
	case c.receipts <- d:
		if !c.opts.ManualDeliverResp {
			_ = c.AckDeliver(h.Sequence, smpp.StatusOK)
		}
	default:
		c.refused.Add(1)
		_ = c.AckDeliver(h.Sequence, smpp.StatusThrottled)
	}
}

// cstr appends s and a NUL.
func cstr(b []byte, s string) []byte { return append(append(b, s...), 0) }

// cutCString splits a C-Octet String off b.
func cutCString(b []byte) (s, rest []byte, ok bool) {
	for i, c := range b {
		if c == 0 {
			return b[:i], b[i+1:], true
		}
	}
	return b, nil, false
}
