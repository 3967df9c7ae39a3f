// Package admin is the proxy's operator endpoint over HTTP: Prometheus
// metrics, liveness and readiness probes, and the JSON API under /api/v1/
// that the smppproxy CLI uses (sessions, records, operator resolution,
// kept receipts, stats), plus a Client for that API.
//
// Routes:
//
//	GET  /healthz                 200 while the process serves HTTP
//	GET  /readyz                  200 once Config.Ready says so, else 503
//	GET  /metrics                 Prometheus text format from Config.Gatherer
//	GET  /api/v1/sessions         SessionList
//	POST /api/v1/sessions/kick    {"id": ID} → KickResult; 404 for an unknown id
//	GET  /api/v1/keys             ?account=A&state=S&limit=N → RecordList
//	GET  /api/v1/keys/show        ?account=A&key=K[&segment=S] → RecordList
//	POST /api/v1/keys/resolve     ResolveRequest → Record
//	GET  /api/v1/stats            Stats
//	GET  /api/v1/receipts/unmatched ?upstream=U&limit=N → UnmatchedList;
//	                              501 without Config.Receipts
//	GET  /api/v1/upstreams, /api/v1/accounts, POST …/drain|resume|disable|enable,
//	POST /api/v1/reload           the operator's switches and the reload
//	                              (operator_api.go); 501 without
//	                              Config.Operator / Config.Reload
//	GET  /debug/pprof/            Go's profiler (net/http/pprof), only with
//	                              Config.Pprof (else 404)
//
// With Config.Token set, /metrics, /debug/pprof/ and /api/v1/ need "Authorization: Bearer
// TOKEN" (compared in constant time); anything else is answered 401 before
// the request is looked at. The probes stay open: they reveal nothing and
// orchestrators call them without credentials.
//
// Calls that change state (every /api/v1/ method but GET, HEAD and
// OPTIONS: kick, resolve, drain, resume, disable, enable, reload) are kept out of a web browser's reach:
// they need "Content-Type: application/json" (else 415), an Origin header,
// if any, must name the admin listener itself (else 403), and without a
// token they are refused (403) unless the listener is loopback. NewServer
// adds read, write and idle timeouts.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/dlr"
	"github.com/smppproxy/smppproxy/logx"
	"github.com/smppproxy/smppproxy/session"
	"github.com/smppproxy/smppproxy/state"
)

// Sessions lists and kicks live sessions (*session.Registry).
type Sessions interface {
	List() []session.Info
	Kick(id string) error
}

// Resolver settles unknown records (*dedup.Engine).
type Resolver interface {
	ResolveAccepted(ctx context.Context, k state.Key, messageID, who string) (*state.Record, error)
	ResolveNotSent(ctx context.Context, k state.Key, who string) (*state.Record, error)
}

// Receipts lists the receipts kept because they matched no record
// (*dlr.Service).
type Receipts interface {
	Unmatched(ctx context.Context, upstream string, limit int) ([]dlr.UnmatchedReceipt, error)
}

// Defaults of Config's limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10_000
)

// Config configures NewHandler. Sessions, Store and Resolver are required.
type Config struct {
	Sessions Sessions
	Store    state.Store
	Resolver Resolver
	// Receipts serves /api/v1/receipts/unmatched (nil: that endpoint
	// answers 501).
	Receipts Receipts
	// Status lists the upstreams and accounts on the status page at /
	// (nil: those seen in sessions and metrics only). See status.go.
	Status StatusSource
	// Gatherer serves /metrics and feeds /api/v1/stats and the receipts
	// pending of /api/v1/sessions (the receipt queue depth gauge); nil =
	// an empty registry.
	Gatherer prometheus.Gatherer
	// Ready decides /readyz (nil = always ready).
	Ready func() error
	// Token, when not empty, is the bearer token /metrics and /api/v1/
	// require.
	Token string
	// ScanCap bounds the records a listing visits (0 =
	// state.DefaultScanCap); a listing that stops there says Truncated.
	ScanCap int
	Logger  *slog.Logger
	// Address is the admin listener's address (host:port). Without a
	// Token, the mutating endpoints answer only when it is loopback; empty
	// = judged per request from the address the connection came in on.
	Address string
	// Pprof serves Go's profiler (net/http/pprof) under /debug/pprof/,
	// behind the same Token as /metrics; false (the default) = 404 there.
	// The profiles show the process's memory and code: the caller keeps it
	// off a non-loopback listener without a Token (config.Validate does).
	Pprof bool
	// Tagger turns fingerprints into the short tags the API shows instead
	// (nil: the Resolver when it is one, as *dedup.Engine is; else a
	// random key of this handler, so tags compare within it only).
	Tagger Tagger
	// Operator serves /api/v1/upstreams and /api/v1/accounts with their
	// switches (nil: those endpoints answer 501). See operator_api.go.
	Operator Operator
	// Reload serves POST /api/v1/reload (nil: 501).
	Reload ReloadFunc
}

// Timeouts of the server NewServer returns. WriteTimeout leaves room for
// a listing that visits ScanCap records.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = 60 * time.Second
	IdleTimeout       = 120 * time.Second
)

// NewServer returns the admin server for ln: NewHandler(cfg), with
// cfg.Address taken from ln when empty, and the timeouts above. It warns
// (cfg.Logger) when the mutating endpoints will be refused because no
// token is set and the listener is not loopback.
func NewServer(ln net.Listener, cfg Config) *http.Server {
	if cfg.Address == "" {
		cfg.Address = ln.Addr().String()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Token == "" && !isLoopback(cfg.Address) {
		log.Warn("admin API listens on a non-loopback address without a token: kick, resolve and every other call that changes state are refused; set admin.token_file to allow them", "address", cfg.Address)
	}
	return &http.Server{
		Handler:           NewHandler(cfg),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// ReadToken reads a bearer token from a file: its content without
// surrounding white space, which must not be empty.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin: token file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("admin: token file %s is empty", path)
	}
	return t, nil
}

type handler struct {
	cfg Config
	log *slog.Logger
	// refusedLog limits the refused-mutation warnings to one per source
	// per minute (a web page can send many).
	refusedLog *logx.Limiter
	tag        Tagger
}

// NewHandler returns the admin endpoint.
func NewHandler(cfg Config) http.Handler {
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.NewRegistry()
	}
	if cfg.ScanCap <= 0 {
		cfg.ScanCap = state.DefaultScanCap
	}
	h := &handler{cfg: cfg, log: cfg.Logger, tag: tagger(cfg), refusedLog: logx.NewLimiter(time.Minute, 1024, nil)}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", h.readyz)
	mux.Handle("GET /metrics", h.auth(promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{ErrorLog: slogPrinter{h.log}})))
	if cfg.Pprof {
		mux.Handle("/debug/pprof/", h.auth(pprofHandler()))
	}
	api := http.NewServeMux()
	api.HandleFunc("GET /api/v1/sessions", h.sessions)
	api.HandleFunc("POST /api/v1/sessions/kick", h.kick)
	api.HandleFunc("GET /api/v1/keys", h.listKeys)
	api.HandleFunc("GET /api/v1/keys/show", h.showKey)
	api.HandleFunc("POST /api/v1/keys/resolve", h.resolve)
	api.HandleFunc("GET /api/v1/stats", h.stats)
	api.HandleFunc("GET /api/v1/receipts/unmatched", h.unmatched)
	h.operatorRoutes(api)
	api.HandleFunc("/api/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API endpoint: "+r.Method+" "+r.URL.Path)
	})
	mux.Handle("/api/v1/", h.auth(h.guardMutations(api)))
	h.mountStatus(mux, api) // GET /, /static/ and /api/v1/status: the status page (status.go)
	return h.hostGuard(mux)
}

// hostGuard, when no token is configured, answers only requests addressed
// to an IP address, to localhost, or to the host name the listener was
// configured with, and the health probes whatever they name. Without it a
// web page whose host name an attacker points at this machine once it is
// loaded (DNS rebinding) would be same-origin with the listener in an
// operator's browser, and could read sessions, keys, metrics and the status
// page; such a request names the attacker's host. With a token the token
// decides (a page cannot send it).
func (h *handler) hostGuard(next http.Handler) http.Handler {
	if h.cfg.Token != "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || h.hostAllowed(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		if ok, n := h.refusedLog.Allow(remoteHost(r)); ok {
			h.log.Warn("admin request refused", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "why", "addressed to another host name", "suppressed", n)
		}
		writeError(w, http.StatusMisdirectedRequest, "without admin.token_file the admin API answers only requests addressed to an IP address or localhost (a host name may be a DNS rebinding attack from a web page); set a token to reach it by name")
	})
}

// hostAllowed reports whether a request's Host (host[:port]) may reach
// the API without a token (hostGuard).
func (h *handler) hostAllowed(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(hostPort, "["), "]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	configured, _, err := net.SplitHostPort(h.cfg.Address)
	return err == nil && configured != "" && strings.EqualFold(configured, host)
}

// guardMutations keeps every call that may change state (any method but
// GET, HEAD and OPTIONS) out of a web browser's reach: without a token
// only on a loopback listener, only with a JSON body (a page can send a
// form or text/plain without asking), and never from a foreign Origin.
func (h *handler) guardMutations(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		code, why := h.refuseMutation(r)
		if code != 0 {
			if ok, n := h.refusedLog.Allow(remoteHost(r)); ok {
				h.log.Warn("admin request refused", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "why", why, "suppressed", n)
			}
			writeError(w, code, why)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refuseMutation returns the HTTP status and reason that refuse r, or 0.
func (h *handler) refuseMutation(r *http.Request) (int, string) {
	listener := h.cfg.Address
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if listener == "" && local != nil {
		listener = local.String()
	}
	if h.cfg.Token == "" && !isLoopback(listener) {
		return http.StatusForbidden, fmt.Sprintf("calls that change state are refused: the admin API listens on %s, which is not loopback, and no token is configured (set admin.token_file, or listen on 127.0.0.1)", listener)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return http.StatusUnsupportedMediaType, "calls that change state need Content-Type: application/json"
	}
	if origin := r.Header.Get("Origin"); origin != "" && (local == nil || !sameHost(origin, local.String())) {
		return http.StatusForbidden, "cross-origin request refused: Origin " + strconv.Quote(origin) + " is not this admin listener"
	}
	return 0, ""
}

// isLoopback reports whether host:port names a loopback address
// ("localhost" included).
func isLoopback(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		host = hostPort
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// sameHost reports whether origin (scheme://host[:port]) names local, the
// host:port the request came in on; a loopback listener also answers to
// localhost.
func sameHost(origin, local string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return false
	}
	port := u.Port()
	switch {
	case port != "":
	case u.Scheme == "http":
		port = "80"
	case u.Scheme == "https":
		port = "443"
	default:
		return false
	}
	lhost, lport, err := net.SplitHostPort(local)
	if err != nil || port != lport {
		return false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return isLoopback(local)
	}
	a, err1 := netip.ParseAddr(host)
	b, err2 := netip.ParseAddr(lhost)
	return err1 == nil && err2 == nil && a.Unmap() == b.Unmap()
}

// hasToken reports whether r carries the bearer token, or none is set.
func (h *handler) hasToken(r *http.Request) bool {
	if h.cfg.Token == "" {
		return true
	}
	want := sha256.Sum256([]byte(h.cfg.Token))
	scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	sum := sha256.Sum256([]byte(got))
	// The scheme is case-insensitive (RFC 9110); hashing first makes the
	// comparison constant-time in the token's length too.
	return strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}

// remoteHost is r's remote address without its port.
func remoteHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// auth lets a request through only with the bearer token (when one is set).
func (h *handler) auth(next http.Handler) http.Handler {
	if h.cfg.Token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.hasToken(r) {
			if ok, n := h.refusedLog.Allow("token\x00" + remoteHost(r)); ok {
				h.log.Warn("admin request refused: missing or wrong bearer token", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "suppressed", n)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="smppproxy"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if h.cfg.Ready != nil {
		if err := h.cfg.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			if !h.hasToken(r) {
				// A probe needs no token, and learns no account name nor
				// database error: the reason is for those who have it.
				_, _ = w.Write([]byte("not ready\n"))
				return
			}
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
	}
	_, _ = w.Write([]byte("ready\n"))
}

func (h *handler) sessions(w http.ResponseWriter, _ *http.Request) {
	list := h.cfg.Sessions.List()
	if list == nil {
		list = []session.Info{}
	}
	depths, instance, err := sessionGauges(h.cfg.Gatherer)
	if err != nil {
		// The sessions are still worth listing.
		h.log.Warn("admin: receipt queue depths not read; sessions listed without receipts pending", "err", err)
	}
	fillReceiptsPending(list, depths)
	writeJSON(w, http.StatusOK, SessionList{InstanceID: instance, Sessions: list})
}

// fillReceiptsPending sets ReceiptsPending of every receiving ESME session
// whose account has a receipt queue (depths: account → depth).
func fillReceiptsPending(list []session.Info, depths map[string]float64) {
	for i := range list {
		if d, ok := depths[list[i].Owner]; ok && list[i].CanReceive() {
			n := int(d)
			list[i].ReceiptsPending = &n
		}
	}
}

func (h *handler) kick(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID string `json:"id"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	if req.ID == "" {
		writeError(w, http.StatusBadRequest, "id is required")
		return
	}
	if err := h.cfg.Sessions.Kick(req.ID); err != nil {
		if errors.Is(err, session.ErrNotFound) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no session %q that can be kicked", req.ID))
			return
		}
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	h.log.Info("session kicked by operator", "session", req.ID, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, KickResult{Kicked: req.ID})
}

func (h *handler) listKeys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	account, st := q.Get("account"), q.Get("state")
	if st != "" && !validState(st) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("state must be one of sent, accepted, rejected, unknown, retryable (got %q)", st))
		return
	}
	limit, ok := parseLimit(w, q.Get("limit"))
	if !ok {
		return
	}
	out := RecordList{Records: []Record{}}
	visited := 0
	err := h.cfg.Store.Scan(r.Context(), func(rec *state.Record) bool {
		if visited++; visited > h.cfg.ScanCap {
			out.Truncated = true
			return false
		}
		if (account != "" && rec.Key.Account != account) || (st != "" && string(rec.State) != st) {
			return true
		}
		if len(out.Records) == limit {
			out.Truncated = true
			return false
		}
		out.Records = append(out.Records, NewRecord(rec, h.tag))
		return true
	})
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// parseLimit reads a limit parameter (DefaultListLimit when empty); on a
// bad one it answers 400 and returns false.
func parseLimit(w http.ResponseWriter, v string) (int, bool) {
	if v == "" {
		return DefaultListLimit, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxListLimit {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be a number from 1 to %d (got %q)", MaxListLimit, v))
		return 0, false
	}
	return n, true
}

func validState(s string) bool {
	switch state.SubmitState(s) {
	case state.Sent, state.Accepted, state.Rejected, state.Unknown, state.Retryable:
		return true
	}
	return false
}

// showKey answers every record of a key: the one segment asked for, or
// the whole message (segment "" or, for a concatenated message, each part).
func (h *handler) showKey(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	account, key := q.Get("account"), q.Get("key")
	if account == "" || key == "" {
		writeError(w, http.StatusBadRequest, "account and key are required")
		return
	}
	segment, oneSegment := q.Get("segment"), q.Has("segment")
	out := RecordList{Records: []Record{}}
	sks, err := h.storedKeysOf(r.Context(), account, key)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	for _, sk := range sks {
		rec, err := h.cfg.Store.Get(r.Context(), state.Key{Account: account, Key: sk, Segment: segment})
		switch {
		case err == nil:
			out.Records = append(out.Records, NewRecord(rec, h.tag))
			writeJSON(w, http.StatusOK, out)
			return
		case !errors.Is(err, state.ErrNotFound):
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	if !oneSegment {
		// The parts of a concatenated message: bounded scan.
		want := map[string]bool{}
		for _, sk := range sks {
			want[sk] = true
		}
		visited := 0
		err = h.cfg.Store.Scan(r.Context(), func(rec *state.Record) bool {
			if visited++; visited > h.cfg.ScanCap {
				out.Truncated = true
				return false
			}
			if rec.Key.Account == account && want[rec.Key.Key] {
				out.Records = append(out.Records, NewRecord(rec, h.tag))
			}
			return true
		})
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	if len(out.Records) == 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no record for account %q key %q", account, key))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) resolve(w http.ResponseWriter, r *http.Request) {
	var req ResolveRequest
	if !readJSON(w, r, &req) {
		return
	}
	switch {
	case req.Account == "" || req.Key == "":
		writeError(w, http.StatusBadRequest, "account and key are required")
		return
	case (req.MessageID == "") == !req.NotSent:
		writeError(w, http.StatusBadRequest, "exactly one of message_id and not_sent is required")
		return
	}
	var k state.Key
	found := false
	sks, err := h.storedKeysOf(r.Context(), req.Account, req.Key)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	for _, sk := range sks {
		k = state.Key{Account: req.Account, Key: sk, Segment: req.Segment}
		_, err := h.cfg.Store.Get(r.Context(), k)
		if err == nil {
			found = true
			break
		}
		if !errors.Is(err, state.ErrNotFound) {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	if !found {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no record for account %q key %q segment %q", req.Account, req.Key, req.Segment))
		return
	}
	by := req.By
	if by == "" {
		by = "operator"
	}
	who := fmt.Sprintf("%s (admin API from %s)", by, r.RemoteAddr)
	var rec *state.Record
	if req.NotSent {
		rec, err = h.cfg.Resolver.ResolveNotSent(r.Context(), k, who)
	} else {
		rec, err = h.cfg.Resolver.ResolveAccepted(r.Context(), k, req.MessageID, who)
	}
	switch {
	case err == nil:
	case errors.Is(err, state.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
		return
	case errors.Is(err, dedup.ErrNotUnknown), errors.Is(err, dedup.ErrMessageIDHeld), errors.Is(err, dedup.ErrOwnerMayWrite):
		writeError(w, http.StatusConflict, err.Error())
		return
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, NewRecord(rec, h.tag))
}

// unmatched lists kept receipts: of one upstream, or of every one.
func (h *handler) unmatched(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Receipts == nil {
		writeError(w, http.StatusNotImplemented, "no receipt service is attached to this admin API")
		return
	}
	q := r.URL.Query()
	limit, ok := parseLimit(w, q.Get("limit"))
	if !ok {
		return
	}
	// One more than asked tells whether there are more.
	list, err := h.cfg.Receipts.Unmatched(r.Context(), q.Get("upstream"), limit+1)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := UnmatchedList{Receipts: list}
	if len(out.Receipts) > limit {
		out.Receipts, out.Truncated = out.Receipts[:limit], true
	}
	if out.Receipts == nil {
		out.Receipts = []dlr.UnmatchedReceipt{}
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) stats(w http.ResponseWriter, _ *http.Request) {
	s, err := BuildStats(h.cfg.Gatherer)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, s)
}

const maxBody = 64 << 10

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "bad request body: "+err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, Error{Error: msg})
}

// slogPrinter adapts a slog.Logger to promhttp's ErrorLog.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.l.Error("metrics: " + fmt.Sprint(v...)) }
