package admin

import (
	"context"

	"github.com/smppproxy/smppproxy/session"
)

// Operator is what the proxy offers an operator beyond sessions and
// records: its upstreams and accounts with their switches, and a reload
// of the configuration. *proxy.App implements everything but Reload,
// which the command wires (it owns the configuration file and the log
// level).
type Operator interface {
	// Upstreams and Accounts list them in configuration order.
	Upstreams() []session.Upstream
	Accounts() []session.Account
	// DrainUpstream stops new submits to an upstream (its binds stay up);
	// ResumeUpstream undoes it. changed is false when nothing changed.
	// An unknown name is an error (session.ErrNoSuchUpstream).
	DrainUpstream(name string) (changed bool, err error)
	ResumeUpstream(name string) (changed bool, err error)
	// DisableAccount refuses an account's binds and closes its sessions
	// (closed says how many); EnableAccount undoes it. An unknown name is
	// an error (session.ErrNoSuchAccount).
	DisableAccount(name string) (changed bool, closed int, err error)
	EnableAccount(name string) (changed bool, err error)
}

// Reloaded is the result of a configuration reload: the changes applied,
// and those that take effect only after a restart.
type Reloaded struct {
	Applied []string `json:"applied"`
	Restart []string `json:"restart,omitempty"`
}

// ReloadFunc re-reads the configuration and puts it in force. A file that
// does not parse or validate changes nothing and is the error (with its
// file:line).
type ReloadFunc func(ctx context.Context) (Reloaded, error)
