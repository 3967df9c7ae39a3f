// Package session is the live registry of the proxy's sessions, on both
// sides: the ESME sessions bound to the proxy and the proxy's own binds to
// upstream SMSCs. It is what the admin API lists and kicks. Each side
// registers a Source; the registry itself holds no session state, so it
// can never disagree with the server or the pools.
package session

import (
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// Side is which side of the proxy a session is on; its value is what the
// admin API writes in "side".
type Side string

// Sides.
const (
	SideESME     Side = "esme"
	SideUpstream Side = "upstream"
)

// ErrNotFound is returned by Kick for an unknown session id.
var ErrNotFound = errors.New("session: not found")

// Errors of the operator actions on an upstream or an account by name
// (the proxy's Drain, Resume, Disable, Enable), here so that the admin
// API tells an unknown name (404) from a failure; compare with errors.Is.
var (
	ErrNoSuchUpstream = errors.New("no such upstream")
	ErrNoSuchAccount  = errors.New("no such account")
)

// Info describes one live session.
type Info struct {
	ID   string `json:"id"`
	Side Side   `json:"side"`
	// Owner is the account (ESME side) or the upstream name.
	Owner string `json:"owner"`
	// Bind is the bind type as the admin API writes it: for an ESME
	// session smpp.BindType's String ("TX", "RX", "TRX", "unbound"), for
	// an upstream bind its Name ("transmitter", "receiver",
	// "transceiver").
	Bind      string    `json:"bind"`
	Remote    string    `json:"remote,omitempty"`
	State     string    `json:"state"`
	Since     time.Time `json:"since,omitempty"`
	InFlight  int       `json:"in_flight"`
	Window    int       `json:"window,omitempty"`
	Requests  uint64    `json:"requests"`
	LastError string    `json:"last_error,omitempty"`
	// ReceiptsPending is, for an ESME session that can receive (RX, TRX),
	// the receipts and MO queued for its account and not yet acknowledged
	// by the ESME: the account's receipt queue, which all its receiving
	// sessions share. nil (absent in JSON) for a transmitter, an upstream
	// bind, or a proxy without a receipt service. The registry leaves it
	// to whoever knows the queues (the admin API fills it).
	ReceiptsPending *int `json:"receipts_pending,omitempty"`
}

// Bind types of an ESME session as Info.Bind writes them (the String of
// smpp.BindTransmitter, smpp.BindReceiver and smpp.BindTransceiver).
var (
	BindTX  = smpp.BindTransmitter.String()
	BindRX  = smpp.BindReceiver.String()
	BindTRX = smpp.BindTransceiver.String()
)

// CanReceive reports whether the session is an ESME session bound to
// receive deliver_sm (receipts and MO): RX or TRX.
func (i Info) CanReceive() bool {
	if i.Side != SideESME {
		return false
	}
	b, err := smpp.ParseBindType(i.Bind)
	return err == nil && b.CanReceive()
}

// Source lists one side's sessions and can close one of them.
type Source interface {
	Sessions() []Info
	// Kick closes the session with id; false if it has no such session.
	Kick(id string) bool
}

// Registry aggregates Sources.
type Registry struct {
	mu      sync.Mutex
	sources []Source
}

// Add registers a source.
func (r *Registry) Add(s Source) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sources = append(r.sources, s)
}

// Remove unregisters a source added before (compared with ==).
func (r *Registry) Remove(s Source) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sources = slices.DeleteFunc(r.sources, func(x Source) bool { return x == s })
}

func (r *Registry) list() []Source {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Source(nil), r.sources...)
}

// List returns every live session, ESME side first, then by id.
func (r *Registry) List() []Info {
	var out []Info
	for _, s := range r.list() {
		out = append(out, s.Sessions()...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Side != out[j].Side {
			return out[i].Side < out[j].Side
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Kick closes the session with id.
func (r *Registry) Kick(id string) error {
	for _, s := range r.list() {
		if s.Kick(id) {
			return nil
		}
	}
	return ErrNotFound
}

// Upstream is one upstream as `smppproxy upstreams list` shows it.
type Upstream struct {
	Name     string `json:"name"`
	Address  string `json:"address"`
	Weight   int    `json:"weight"`
	Binds    int    `json:"binds"`     // sessions configured
	Up       int    `json:"up"`        // sessions bound that can submit
	InFlight int    `json:"in_flight"` // submits awaiting their response
	Drained  bool   `json:"drained"`   // no new submits (drained by an operator)
	Healthy  bool   `json:"healthy"`   // not cooling down after repeated failures
}

// Account is one account as `smppproxy accounts list` shows it.
type Account struct {
	Name       string   `json:"name"`
	Sessions   int      `json:"sessions"` // bound ESME sessions
	MaxBinds   int      `json:"max_binds"`
	Throughput int      `json:"throughput"` // submits/s, 0 = unlimited
	Route      []string `json:"route"`
	Disabled   bool     `json:"disabled"` // binds refused (disabled by an operator)
}
