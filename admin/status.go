package admin

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/smppproxy/smppproxy/session"
	"github.com/smppproxy/smppproxy/state"
)

// The status page: GET / is an HTML page, GET /api/v1/status
// the same data as JSON, GET /static/ the page's script and style sheet,
// all embedded in the binary. With Config.Token set, / is only a shell
// without data: its script asks for the token once, keeps it in the
// tab's sessionStorage and sends it as a bearer token to
// /api/v1/status (which, like every /api/v1/ read, needs it).

// StatusSource is what the status page shows of upstreams and accounts
// beyond the metrics: their configuration and switches (*proxy.App).
type StatusSource interface {
	Upstreams() []session.Upstream
	Accounts() []session.Account
}

// StatusUnknownLimit bounds the unknown records the status page lists;
// StatusScanCap bounds the records it visits to find them.
const (
	StatusUnknownLimit = 50
	StatusScanCap      = 20_000
)

// statusCSP is the page's Content-Security-Policy: its own script and
// style sheet only, no inline code, no frames, no form posts, fetches
// to itself only.
const statusCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

//go:embed static
var staticFiles embed.FS

var statusTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"rate":     formatRate,
	"num":      formatNum,
	"duration": formatDuration,
	"since":    func(t time.Time, now time.Time) string { return formatDuration(now.Sub(t).Seconds()) },
}).ParseFS(staticFiles, "static/*.html"))

// Status is the answer of GET /api/v1/status: what the status page shows.
// Ids, names, counts and states only: never message text, passwords or
// fingerprints (records show their tags).
type Status struct {
	Now time.Time `json:"now"`
	// Version and Revision of the running build (smppproxy_build_info);
	// empty when the metric is not registered.
	Version  string `json:"version,omitempty"`
	Revision string `json:"revision,omitempty"`
	// InstanceID is this instance's id among those sharing a store
	// (store.instance_id; smppproxy_build_info's instance_id label).
	InstanceID string `json:"instance_id,omitempty"`
	// Started is the process's start (process_start_time_seconds, else
	// when the admin handler was made).
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// Ready is "ready" or why /readyz answers 503.
	Ready string `json:"ready"`
	// RateSeconds is the span the rates are measured over (up to a
	// minute); 0 until a second sample exists, and then the rates are
	// absent.
	RateSeconds float64 `json:"rate_seconds"`
	// Accounts and Upstreams: nil Config.Status lists only those seen in
	// the sessions and metrics, and AccountsKnown/UpstreamsKnown is false.
	Accounts       []StatusAccount  `json:"accounts"`
	AccountsKnown  bool             `json:"accounts_known"`
	Upstreams      []StatusUpstream `json:"upstreams"`
	UpstreamsKnown bool             `json:"upstreams_known"`
	// Records by state as of RecordsScannedAt (absent before the first
	// count).
	Records          map[string]float64 `json:"records,omitempty"`
	RecordsScannedAt *time.Time         `json:"records_scanned_at,omitempty"`
	// Unknown lists records waiting for an operator (at most
	// StatusUnknownLimit, found within StatusScanCap records).
	Unknown          []Record `json:"unknown"`
	UnknownTruncated bool     `json:"unknown_truncated,omitempty"`
	// TokenRequired: the resolve action needs the bearer token.
	TokenRequired bool `json:"token_required"`
}

// StatusAccount is one account on the status page.
type StatusAccount struct {
	Name       string         `json:"name"`
	Disabled   bool           `json:"disabled,omitempty"`
	MaxBinds   int            `json:"max_binds,omitempty"`
	Throughput int            `json:"throughput,omitempty"`
	Route      []string       `json:"route,omitempty"`
	Sessions   []session.Info `json:"sessions"`
	// Submits and Throttled are totals since start; the rates are per
	// second over RateSeconds.
	Submits            float64  `json:"submits"`
	SubmitsPerSecond   *float64 `json:"submits_per_second,omitempty"`
	Throttled          float64  `json:"throttled"`
	ThrottledPerSecond *float64 `json:"throttled_per_second,omitempty"`
	// ReceiptQueue: receipts and MO waiting for the account's ESMEs (nil
	// without a receipt service).
	ReceiptQueue *float64 `json:"receipt_queue,omitempty"`
}

// StatusUpstream is one upstream on the status page.
type StatusUpstream struct {
	Name    string `json:"name"`
	Address string `json:"address,omitempty"`
	// State: "bound" (every configured bind up), "partial", "connecting",
	// "down", "drained" or "unhealthy".
	State      string         `json:"state"`
	Binds      int            `json:"binds"`
	Bound      int            `json:"bound"`
	Connecting int            `json:"connecting"`
	InFlight   int            `json:"in_flight"`
	Window     int            `json:"window"`
	Drained    bool           `json:"drained,omitempty"`
	Healthy    bool           `json:"healthy"`
	Sessions   []session.Info `json:"sessions"`
	// Totals since start: requests written, receipts (and MO) received,
	// errors (failed requests and responses with a status other than
	// ESME_ROK); the rates are per second over Status.RateSeconds.
	Requests          float64  `json:"requests"`
	RequestsPerSecond *float64 `json:"requests_per_second,omitempty"`
	Receipts          float64  `json:"receipts"`
	ReceiptsPerSecond *float64 `json:"receipts_per_second,omitempty"`
	Errors            float64  `json:"errors"`
	ErrorsPerSecond   *float64 `json:"errors_per_second,omitempty"`
}

// statusPage serves the page and its JSON; it keeps the counter samples
// the rates are computed from (one per request, no goroutine).
type statusPage struct {
	h       *handler
	created time.Time
	now     func() time.Time
	rates   *rateRing
	static  http.Handler
}

// mountStatus adds GET / and GET /static/ to mux and GET /api/v1/status
// to api (which NewHandler puts behind the token).
func (h *handler) mountStatus(mux, api *http.ServeMux) {
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	p := &statusPage{h: h, created: time.Now(), now: time.Now, rates: newRateRing(time.Minute), static: http.StripPrefix("/static/", http.FileServerFS(sub))}
	mux.HandleFunc("GET /{$}", p.page)
	mux.HandleFunc("GET /static/", p.asset)
	api.HandleFunc("GET /api/v1/status", p.json)
}

func securityHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", statusCSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
}

func (p *statusPage) asset(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w)
	if strings.HasSuffix(r.URL.Path, "/") {
		http.NotFound(w, r) // no listing of the assets
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	p.static.ServeHTTP(w, r)
}

// pageData is what status.html renders: the whole page, or (Status nil,
// a token configured) the shell that asks for the token.
type pageData struct {
	TokenRequired bool
	Status        *Status
}

func (p *statusPage) page(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w)
	w.Header().Set("Cache-Control", "no-store")
	d := pageData{TokenRequired: p.h.cfg.Token != ""}
	if !d.TokenRequired {
		s, err := p.build(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		d.Status = s
	}
	p.render(w, "page", d)
}

// json answers /api/v1/status: JSON, or with ?format=html the page's
// sections as HTML (what the page's script swaps in when it refreshes).
func (p *statusPage) json(w http.ResponseWriter, r *http.Request) {
	s, err := p.build(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Query().Get("format") == "html" {
		securityHeaders(w)
		p.render(w, "sections", pageData{TokenRequired: s.TokenRequired, Status: s})
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (p *statusPage) render(w http.ResponseWriter, name string, d pageData) {
	var buf bytes.Buffer
	if err := statusTemplates.ExecuteTemplate(&buf, name, d); err != nil {
		p.h.log.Error("status page not rendered", "err", err)
		http.Error(w, "status page not rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// build gathers everything the page shows.
func (p *statusPage) build(ctx context.Context) (*Status, error) {
	now := p.now()
	mfs, err := p.h.cfg.Gatherer.Gather()
	if err != nil {
		return nil, err
	}
	fams := make(families, len(mfs))
	for _, mf := range mfs {
		fams[mf.GetName()] = mf
	}
	st, err := BuildStats(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return mfs, nil }))
	if err != nil {
		return nil, err
	}
	s := &Status{Now: now.UTC(), Started: p.created.UTC(), Ready: "ready", TokenRequired: p.h.cfg.Token != "",
		Records: st.Records, RecordsScannedAt: st.RecordsScannedAt, Unknown: []Record{}}
	fams.each(metricBuildInfo, func(l labels, _ float64) {
		s.Version, s.Revision, s.InstanceID = l["version"], l["revision"], l["instance_id"]
	})
	fams.each("process_start_time_seconds", func(_ labels, v float64) {
		s.Started = time.Unix(0, int64(v*1e9)).UTC()
	})
	s.UptimeSeconds = math.Max(0, now.Sub(s.Started).Seconds())
	if p.h.cfg.Ready != nil {
		if err := p.h.cfg.Ready(); err != nil {
			s.Ready = err.Error()
		}
	}
	sessions := p.h.cfg.Sessions.List()
	fillReceiptsPending(sessions, st.ReceiptQueue)
	s.Accounts, s.AccountsKnown = p.accounts(sessions, st)
	s.Upstreams, s.UpstreamsKnown = p.upstreams(sessions, st)
	receipts := map[string]float64{}
	fams.each(metricReceipts, func(l labels, v float64) { receipts[l["upstream"]] += v })
	for i := range s.Upstreams {
		s.Upstreams[i].Receipts = receipts[s.Upstreams[i].Name]
	}
	p.fillRates(s, now)
	if err := p.unknown(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// accounts lists the configured accounts (or those seen) with their
// sessions and counters.
func (p *statusPage) accounts(sessions []session.Info, st *Stats) ([]StatusAccount, bool) {
	known := p.h.cfg.Status != nil
	list := newNamed(func(name string) StatusAccount { return StatusAccount{Name: name} })
	if known {
		for _, a := range p.h.cfg.Status.Accounts() {
			*list.get(a.Name) = StatusAccount{Name: a.Name, Disabled: a.Disabled, MaxBinds: a.MaxBinds, Throughput: a.Throughput, Route: a.Route}
		}
	}
	get := list.get
	for _, si := range sessions {
		if si.Side == session.SideESME && si.Owner != "" {
			a := get(si.Owner)
			a.Sessions = append(a.Sessions, si)
		}
	}
	if !known {
		for name := range st.SubmitsByAccount {
			if name != "" {
				get(name)
			}
		}
	}
	out := list.items
	if !known {
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	}
	for i := range out {
		a := &out[i]
		if a.Sessions == nil {
			a.Sessions = []session.Info{}
		}
		for outcome, v := range st.SubmitsByAccount[a.Name] {
			a.Submits += v
			if outcome == "throttled" {
				a.Throttled += v
			}
		}
		if q, ok := st.ReceiptQueue[a.Name]; ok {
			a.ReceiptQueue = &q
		}
	}
	return out, known
}

// upstreams lists the configured upstreams (or those seen) with their
// binds and counters.
func (p *statusPage) upstreams(sessions []session.Info, st *Stats) ([]StatusUpstream, bool) {
	known := p.h.cfg.Status != nil
	list := newNamed(func(name string) StatusUpstream { return StatusUpstream{Name: name, Healthy: true} })
	if known {
		for _, u := range p.h.cfg.Status.Upstreams() {
			*list.get(u.Name) = StatusUpstream{Name: u.Name, Address: u.Address, Binds: u.Binds, Drained: u.Drained, Healthy: u.Healthy}
		}
	}
	get := list.get
	for _, si := range sessions {
		if si.Side == session.SideUpstream {
			u := get(si.Owner)
			u.Sessions = append(u.Sessions, si)
			u.InFlight += si.InFlight
			u.Window += si.Window
		}
	}
	for _, name := range slices.Sorted(maps.Keys(st.Upstreams)) {
		us := st.Upstreams[name]
		u := get(name)
		u.Bound, u.Connecting = int(us.Bound), int(us.Connecting)
		u.Requests = us.Written
		for status, v := range us.Responses {
			if status != "ESME_ROK" {
				u.Errors += v
			}
		}
		for _, v := range us.Failed {
			u.Errors += v
		}
	}
	out := list.items
	for i := range out {
		u := &out[i]
		if u.Sessions == nil {
			u.Sessions = []session.Info{}
		}
		if !known && u.Binds < u.Bound+u.Connecting {
			u.Binds = u.Bound + u.Connecting
		}
		u.State = upstreamState(u)
	}
	return out, known
}

// named is a list kept in first-seen order whose items are found by name;
// get adds a new one (made by mk) for a name not seen yet.
type named[T any] struct {
	items []T
	index map[string]int
	mk    func(name string) T
}

func newNamed[T any](mk func(name string) T) *named[T] {
	return &named[T]{index: map[string]int{}, mk: mk}
}

func (n *named[T]) get(name string) *T {
	i, ok := n.index[name]
	if !ok {
		i = len(n.items)
		n.index[name] = i
		n.items = append(n.items, n.mk(name))
	}
	return &n.items[i]
}

// upstreamState says in a word how an upstream is.
func upstreamState(u *StatusUpstream) string {
	switch {
	case u.Drained:
		return "drained"
	case !u.Healthy:
		return "unhealthy"
	case u.Bound > 0 && u.Bound >= u.Binds:
		return "bound"
	case u.Bound > 0:
		return "partial"
	case u.Connecting > 0:
		return "connecting"
	}
	return "down"
}

// unknown lists the records waiting for an operator, skipping the scan
// when the records count says there are none.
func (p *statusPage) unknown(ctx context.Context, s *Status) error {
	if n, ok := s.Records[string(state.Unknown)]; ok && n == 0 && s.RecordsScannedAt != nil {
		return nil
	}
	visited := 0
	return p.h.cfg.Store.Scan(ctx, func(rec *state.Record) bool {
		if visited++; visited > min(StatusScanCap, p.h.cfg.ScanCap) {
			s.UnknownTruncated = true
			return false
		}
		if rec.State != state.Unknown {
			return true
		}
		if len(s.Unknown) == StatusUnknownLimit {
			s.UnknownTruncated = true
			return false
		}
		r := NewRecord(rec, p.h.tag)
		r.History = nil
		s.Unknown = append(s.Unknown, r)
		return true
	})
}

// formatRate writes a rate per second for the page ("–" when not known).
func formatRate(v *float64) string {
	if v == nil {
		return "–"
	}
	return strconv.FormatFloat(*v, 'f', rateDigits(*v), 64)
}

func rateDigits(v float64) int {
	switch {
	case v == 0 || v >= 100:
		return 0
	case v >= 10:
		return 1
	}
	return 2
}

// formatNum writes a count (counters are whole numbers).
func formatNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// formatDuration writes seconds as "3d 4h", "4h 5m", "5m 6s" or "6s".
func formatDuration(sec float64) string {
	d := time.Duration(sec) * time.Second
	days, h, m, s := int(d/(24*time.Hour)), int(d/time.Hour)%24, int(d/time.Minute)%60, int(d/time.Second)%60
	switch {
	case days > 0:
		return fmt.Sprintf("%dd %dh", days, h)
	case h > 0:
		return fmt.Sprintf("%dh %dm", h, m)
	case m > 0:
		return fmt.Sprintf("%dm %ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}
