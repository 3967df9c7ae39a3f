package proxy

import (
	"fmt"
	"maps"
	"slices"

	"github.com/smppproxy/smppproxy/session"
	"github.com/smppproxy/smppproxy/smppclient"
)

// Errors of the operator actions; compare with errors.Is.
var (
	ErrNoSuchUpstream = session.ErrNoSuchUpstream
	ErrNoSuchAccount  = session.ErrNoSuchAccount
)

// Upstreams lists the configured upstreams in configuration order.
func (a *App) Upstreams() []session.Upstream {
	var out []session.Upstream
	r := a.instr.router
	pools := a.poolsByName()
	for _, u := range a.config().Upstreams {
		s := session.Upstream{Name: u.Name, Address: u.Address, Weight: u.Weight, Binds: u.Binds,
			Drained: r.Drained(u.Name), Healthy: r.Healthy(u.Name)}
		if p := pools[u.Name]; p != nil {
			s.Up = p.Up()
			for _, si := range p.Sessions() {
				s.InFlight += si.InFlight
			}
		}
		out = append(out, s)
	}
	return out
}

// DrainUpstream stops new submits to upstream name: every route skips it
// (as if it were down), submits already written to it finish, and its
// binds stay up so its receipts keep arriving. It lasts until
// ResumeUpstream or a restart (it is not written to the configuration).
// changed is false when it was drained already.
func (a *App) DrainUpstream(name string) (changed bool, err error) {
	if a.config().Upstream(name) == nil {
		return false, fmt.Errorf("%w %q", ErrNoSuchUpstream, name)
	}
	changed = a.instr.router.Drain(name)
	if changed {
		a.log.Warn("upstream drained by an operator: no new submits", "upstream", name)
	}
	return changed, nil
}

// ResumeUpstream undoes DrainUpstream; changed is false when it was not
// drained.
func (a *App) ResumeUpstream(name string) (changed bool, err error) {
	if a.config().Upstream(name) == nil {
		return false, fmt.Errorf("%w %q", ErrNoSuchUpstream, name)
	}
	changed = a.instr.router.Resume(name)
	if changed {
		a.log.Warn("upstream resumed by an operator", "upstream", name)
	}
	return changed, nil
}

// Accounts lists the configured accounts in configuration order.
func (a *App) Accounts() []session.Account {
	bound := map[string]int{}
	for _, ss := range a.server.Sessions() {
		if acct := ss.Account(); acct != "" {
			bound[acct]++
		}
	}
	var out []session.Account
	for _, acc := range a.config().Accounts {
		out = append(out, session.Account{
			Name: acc.SystemID, Sessions: bound[acc.SystemID], MaxBinds: acc.MaxBinds,
			Throughput: acc.Throughput, Route: slices.Clone(acc.Route), Disabled: a.auth.isDisabled(acc.SystemID),
		})
	}
	return out
}

// DisableAccount refuses new binds of account name and closes its bound
// sessions (closed says how many). Its queued receipts stay queued. It
// lasts until EnableAccount or a restart (it is not written to the
// configuration). changed is false when it was disabled already.
func (a *App) DisableAccount(name string) (changed bool, closed int, err error) {
	if a.config().Account(name) == nil {
		return false, 0, fmt.Errorf("%w %q", ErrNoSuchAccount, name)
	}
	_, was := a.auth.disabled.LoadOrStore(name, struct{}{})
	for _, ss := range a.server.Sessions() {
		if ss.Account() == name {
			ss.Kick()
			closed++
		}
	}
	if !was {
		a.log.Warn("account disabled by an operator: binds refused", "account", name, "sessions_closed", closed)
	}
	return !was, closed, nil
}

// EnableAccount undoes DisableAccount; changed is false when it was not
// disabled.
func (a *App) EnableAccount(name string) (changed bool, err error) {
	if a.config().Account(name) == nil {
		return false, fmt.Errorf("%w %q", ErrNoSuchAccount, name)
	}
	_, was := a.auth.disabled.LoadAndDelete(name)
	if was {
		a.log.Warn("account enabled by an operator", "account", name)
	}
	return was, nil
}

// poolList returns the upstream pools in force.
func (a *App) poolList() []*smppclient.Pool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.pools)
}

// poolsByName returns the upstream pools in force by name.
func (a *App) poolsByName() map[string]*smppclient.Pool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.byName)
}
