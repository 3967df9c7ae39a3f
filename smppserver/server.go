package smppserver

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smppproxy/smppproxy/logx"
	"github.com/smppproxy/smppproxy/smpp"
)

// MaxUnboundPDUSize bounds command_length before a session is bound
// (any bind fits in a few hundred bytes); MaxPDUSize applies after bind.
const MaxUnboundPDUSize = 1024

// Errors of this package.
var (
	// ErrServerClosed is returned by Serve after Shutdown or Close.
	ErrServerClosed = errors.New("smppserver: server closed")
	// ErrAlreadyWritten is returned by a second write to a ResponseWriter.
	ErrAlreadyWritten = errors.New("smppserver: response already written")
	// ErrSessionClosed is returned when writing to a closed session.
	ErrSessionClosed = errors.New("smppserver: session closed")
)

// BindRequest is what an ESME presented in its bind.
type BindRequest struct {
	SystemID         string
	Password         string
	SystemType       string
	InterfaceVersion byte
	Type             smpp.BindType
	Remote           net.Addr
}

// Principal is an authenticated account.
type Principal struct {
	Account string
	// MaxBinds caps the account's concurrent sessions on this server (0 = no cap).
	MaxBinds int
	// Window caps outstanding requests per session (0 = Server.Window).
	Window int
	// Value carries the caller's account object (for example its config).
	Value any
}

// Authenticator checks a bind. A non-zero status refuses the bind with it
// (normally ESME_RBINDFAIL 0x0D) and the connection is closed.
type Authenticator interface {
	Authenticate(ctx context.Context, req BindRequest) (*Principal, smpp.Status)
}

// AuthFunc adapts a function to Authenticator.
type AuthFunc func(ctx context.Context, req BindRequest) (*Principal, smpp.Status)

// Authenticate calls f.
func (f AuthFunc) Authenticate(ctx context.Context, req BindRequest) (*Principal, smpp.Status) {
	return f(ctx, req)
}

// Server serves SMPP sessions. Zero values of the timeout fields mean the
// documented defaults; set them before Serve.
type Server struct {
	Handler Handler
	Auth    Authenticator
	// SystemID is sent in bind responses (default "smppproxy").
	SystemID string
	// BindTimeout closes a connection not bound this long after connect (default 10s).
	BindTimeout time.Duration
	// EnquireLink: the server sends enquire_link after this long without
	// traffic and closes a session from which nothing arrived for three
	// times as long (default 30s).
	EnquireLink time.Duration
	// MaxPDUSize bounds command_length once the session is bound (default
	// 64 KiB). Before bind at most MaxUnboundPDUSize is read.
	MaxPDUSize int
	// MaxConnections caps the open connections over all listeners (0 = no
	// cap). A connection beyond it is accepted and closed at once, with
	// nothing sent, and counted (RefusedCounts).
	MaxConnections int
	// MaxConnectionsPerIP caps the open connections from one source
	// address (0 = no cap), the same way.
	MaxConnectionsPerIP int
	// Window bounds concurrently handled requests per session when the
	// Principal does not (default 50). Requests beyond it get ESME_RTHROTTLED.
	Window int
	// WriteTimeout bounds one flush to the socket (default 10s).
	WriteTimeout time.Duration
	// UnbindWait bounds how long a client's unbind waits for its
	// requests in flight to be answered before the unbind_resp (default
	// 30s: above a submit's longest forward with the default timeouts).
	UnbindWait time.Duration
	Logger     *slog.Logger
	// OnBound is called when a session is bound, once its bind_resp is
	// queued (a request sent from here cannot overtake it). OnClosed is
	// called when a bound session ends, with CloseReason set; sessions that
	// never bound are reported to neither. For one session OnBound always
	// comes before OnClosed, both from the session's reader goroutine.
	// Neither may block.
	OnBound  func(s *Session)
	OnClosed func(s *Session)
	// OnWindowFull, when set, is called with the account of a session
	// whose request was answered ESME_RTHROTTLED because its window was
	// full (on the session's reader: keep it short).
	OnWindowFull func(account string)

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	sessions  map[*Session]struct{}
	perAcct   map[string]int
	closed    bool
	connWG    sync.WaitGroup
	nextID    atomic.Uint64
	panics    atomic.Uint64
	// handlerIdle is how long a session's handler goroutine waits for the
	// next request before it ends (default workerIdle; tests set it).
	handlerIdle   time.Duration
	unbindWaitSet atomic.Int64 // SetUnbindWait's, over UnbindWait
	// readerWaits, when set (tests), is called by a session's reader that
	// waits for a request's answer to be queued before it admits the next.
	readerWaits func()
	closedBy    [len(reasonNames)]atomic.Uint64
	unwritten   atomic.Uint64
	conns       int
	perIP       map[netip.Addr]int
	refused     [len(refuseNames)]atomic.Uint64
	refuseLog   *logx.Limiter
	bindLog     *logx.Limiter
}

// OpenConnections is the number of connections being served (bound or
// not), as counted against MaxConnections.
func (s *Server) OpenConnections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

func (s *Server) bindTimeout() time.Duration  { return durOr(s.BindTimeout, 10*time.Second) }
func (s *Server) idleHandler() time.Duration  { return durOr(s.handlerIdle, workerIdle) }
func (s *Server) enquireLink() time.Duration  { return durOr(s.EnquireLink, 30*time.Second) }
func (s *Server) writeTimeout() time.Duration { return durOr(s.WriteTimeout, 10*time.Second) }
func (s *Server) unbindWait() time.Duration {
	if d := s.unbindWaitSet.Load(); d > 0 {
		return time.Duration(d)
	}
	return durOr(s.UnbindWait, 30*time.Second)
}

// SetUnbindWait changes UnbindWait while the server runs (a reload).
func (s *Server) SetUnbindWait(d time.Duration) { s.unbindWaitSet.Store(int64(d)) }
func (s *Server) maxPDU() int {
	if s.MaxPDUSize > 0 {
		return s.MaxPDUSize
	}
	return smpp.DefaultMaxPDUSize
}
func (s *Server) window() int {
	if s.Window > 0 {
		return s.Window
	}
	return 50
}
func (s *Server) systemID() string {
	if s.SystemID != "" {
		return s.SystemID
	}
	return "smppproxy"
}
func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func durOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// ListenAndServe listens on addr and serves.
func (s *Server) ListenAndServe(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(l)
}

// Serve accepts connections on l until Shutdown or Close, and returns
// ErrServerClosed then. Temporary accept errors are retried with a capped
// back-off (5ms doubling to 1s).
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.Close()
		return ErrServerClosed
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			if retryableAccept(err) {
				delay = min(max(delay*2, 5*time.Millisecond), time.Second)
				s.logger().Warn("accept error; retrying", "err", err, "delay", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		ip := RemoteIP(c.RemoteAddr())
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return ErrServerClosed
		}
		if r := s.refuseLocked(ip); r != refusedNone {
			s.mu.Unlock()
			s.refuse(c, ip, r)
			continue
		}
		s.connWG.Add(1)
		s.mu.Unlock()
		sess := newSession(s, c)
		go func() {
			defer s.connWG.Done()
			defer s.releaseConn(ip)
			sess.run()
		}()
	}
}

// refuseReason is why a connection was closed at accept.
type refuseReason int

const (
	refusedNone refuseReason = iota
	refusedMaxConnections
	refusedMaxConnectionsPerIP
)

// refuseNames are the metric label values of the refusal reasons.
var refuseNames = [...]string{
	refusedMaxConnections:      "max_connections",
	refusedMaxConnectionsPerIP: "max_connections_per_ip",
}

// String is the reason's name, its metric label value.
func (r refuseReason) String() string {
	if r > refusedNone && int(r) < len(refuseNames) {
		return refuseNames[r]
	}
	return "none"
}

// MarshalText writes the name, so log handlers print it, not a number.
func (r refuseReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// refuseLocked counts a new connection from ip against the caps, or
// returns why it is refused; s.mu is held.
func (s *Server) refuseLocked(ip netip.Addr) refuseReason {
	if s.MaxConnections > 0 && s.conns >= s.MaxConnections {
		return refusedMaxConnections
	}
	if s.MaxConnectionsPerIP > 0 && s.perIP[ip] >= s.MaxConnectionsPerIP {
		return refusedMaxConnectionsPerIP
	}
	if s.perIP == nil {
		s.perIP = make(map[netip.Addr]int)
	}
	s.conns++
	s.perIP[ip]++
	return refusedNone
}

// refuse closes a connection beyond a cap, counts it and logs it (one
// line per source address per minute, with the count of those held back).
func (s *Server) refuse(c net.Conn, ip netip.Addr, r refuseReason) {
	s.refused[r].Add(1) // counted before the peer can see the close
	_ = c.Close()
	s.mu.Lock()
	if s.refuseLog == nil {
		s.refuseLog = logx.NewLimiter(time.Minute, 1024, nil)
	}
	lim := s.refuseLog
	s.mu.Unlock()
	if ok, n := lim.Allow(ip.String()); ok {
		s.logger().Warn("connection refused", "remote", ip.String(), "reason", r, "suppressed", n)
	}
}

// warnBind logs a refused or malformed bind, or a PDU whose
// command_length closed the session, at most once per source address per
// minute, with the count of the lines held back.
func (s *Server) warnBind(remote net.Addr, msg string, args ...any) {
	s.mu.Lock()
	if s.bindLog == nil {
		s.bindLog = logx.NewLimiter(time.Minute, 1024, nil)
	}
	lim := s.bindLog
	s.mu.Unlock()
	if ok, n := lim.Allow(RemoteIP(remote).String()); ok {
		s.logger().Warn(msg, append(args, "suppressed", n)...)
	}
}

// releaseConn gives back a connection's place under the caps.
func (s *Server) releaseConn(ip netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns--
	if s.perIP[ip]--; s.perIP[ip] <= 0 {
		delete(s.perIP, ip)
	}
}

// RefusedCounts returns how many connections were closed at accept, by
// reason ("max_connections", "max_connections_per_ip").
func (s *Server) RefusedCounts() map[string]uint64 {
	out := make(map[string]uint64, len(refuseNames)-1)
	for r := refusedMaxConnections; int(r) < len(refuseNames); r++ {
		out[r.String()] = s.refused[r].Load()
	}
	return out
}

// RemoteIP is the IP address of a connection's remote end, IPv4-mapped
// addresses unmapped (the zero Addr when it has none, as for a pipe: such
// connections share one count).
func RemoteIP(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	if a != nil {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			return ap.Addr().Unmap()
		}
	}
	return netip.Addr{}
}

// retryableAccept reports accept errors worth retrying (timeouts,
// file-descriptor exhaustion and the like).
func retryableAccept(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	type temporary interface{ Temporary() bool }
	t, ok := err.(temporary)
	return ok && t.Temporary()
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) closeListenersLocked() {
	s.closed = true
	for l := range s.listeners {
		_ = l.Close()
	}
}

// Shutdown stops accepting, closes the sessions that are not bound, and
// drains the bound ones: each is sent an unbind, new requests on it are
// refused with ESME_RSYSERR, and once its requests in flight are answered
// and the ESME's unbind_resp is in (or a second has passed) it is closed
// after its queue is flushed. Shutdown returns nil when all sessions are
// gone. If ctx ends first, the remaining sessions are closed as by Close and
// ctx.Err() is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closeListenersLocked()
	sessions := make([]*Session, 0, len(s.sessions))
	for ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	for _, ss := range sessions {
		ss.beginShutdown()
	}
	done := make(chan struct{})
	go func() {
		s.connWG.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.closeAll(ReasonServerShutdown)
		<-done
		return ctx.Err()
	}
}

// Close stops accepting and closes every connection at once. The context
// of the requests in flight is cancelled; Close returns when their handlers
// have returned.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closeListenersLocked()
	s.mu.Unlock()
	s.closeAll(ReasonServerShutdown)
	s.connWG.Wait()
	return nil
}

func (s *Server) closeAll(r CloseReason) {
	s.mu.Lock()
	sessions := make([]*Session, 0, len(s.sessions))
	for ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	for _, ss := range sessions {
		ss.close(r)
	}
}

// Sessions returns the live sessions (bound or not yet bound).
func (s *Server) Sessions() []*Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Session, 0, len(s.sessions))
	for ss := range s.sessions {
		out = append(out, ss)
	}
	return out
}

// Session returns the live session with id, or nil.
func (s *Server) Session(id string) *Session {
	for _, ss := range s.Sessions() {
		if ss.ID() == id {
			return ss
		}
	}
	return nil
}

// ClosedCounts returns how many sessions ended, by reason, bound or not
// (bind_timeout and bind_failed are sessions that never bound).
func (s *Server) ClosedCounts() map[CloseReason]uint64 {
	out := make(map[CloseReason]uint64, len(s.closedBy))
	for r := range s.closedBy {
		if r != int(ReasonNone) {
			out[CloseReason(r)] = s.closedBy[r].Load()
		}
	}
	return out
}

// Panics returns how many panics in handlers and in the Authenticator were
// recovered.
func (s *Server) Panics() uint64 { return s.panics.Load() }

// Unwritten returns how many requests the server answered with
// ESME_RSYSERR because their handler returned without writing (panics
// included).
func (s *Server) Unwritten() uint64 { return s.unwritten.Load() }

func (s *Server) track(ss *Session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.sessions == nil {
		s.sessions = make(map[*Session]struct{})
		s.perAcct = make(map[string]int)
	}
	s.sessions[ss] = struct{}{}
	return true
}

func (s *Server) untrack(ss *Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, ss)
}

// admit counts a bind against the account's MaxBinds.
func (s *Server) admit(p *Principal) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.MaxBinds > 0 && s.perAcct[p.Account] >= p.MaxBinds {
		return false
	}
	s.perAcct[p.Account]++
	return true
}

func (s *Server) release(p *Principal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.perAcct[p.Account]--
}

// ReceiversOf returns the bound sessions of account that can receive.
func (s *Server) ReceiversOf(account string) []*Session {
	var out []*Session
	for _, ss := range s.Sessions() {
		if p := ss.Principal(); p != nil && p.Account == account && ss.BindType().CanReceive() && ss.isAnnounced() && !ss.isClosing() {
			out = append(out, ss)
		}
	}
	return out
}
