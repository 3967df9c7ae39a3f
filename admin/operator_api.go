package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/smppproxy/smppproxy/session"
)

// The operator's switches and the reload, served when Config.Operator and
// Config.Reload are set (else 501):
//
//	GET  /api/v1/upstreams          UpstreamList
//	POST /api/v1/upstreams/drain    {"name": N} → Switched; 404 for an unknown name
//	POST /api/v1/upstreams/resume   {"name": N} → Switched
//	GET  /api/v1/accounts           AccountList
//	POST /api/v1/accounts/disable   {"name": N} → Switched (Closed: sessions closed)
//	POST /api/v1/accounts/enable    {"name": N} → Switched
//	POST /api/v1/reload             {} → Reloaded; 422 with ReloadError when the
//	                                configuration does not parse or validate
//
// The POSTs are mutations: the token, loopback and JSON rules apply.

// UpstreamList is the answer of GET /api/v1/upstreams.
type UpstreamList struct {
	Upstreams []session.Upstream `json:"upstreams"`
}

// AccountList is the answer of GET /api/v1/accounts.
type AccountList struct {
	Accounts []session.Account `json:"accounts"`
}

// NameRequest is the body of the drain, resume, disable and enable calls.
type NameRequest struct {
	Name string `json:"name"`
}

// Switched is the answer of a drain, resume, disable or enable: what was
// asked (Action "drain", "resume", "disable", "enable"), whether it changed
// anything (false: it already was so), and for a disable the sessions it
// closed.
type Switched struct {
	Name    string `json:"name"`
	Action  string `json:"action"`
	Changed bool   `json:"changed"`
	Closed  int    `json:"closed,omitempty"`
}

// ReloadError is the body of a refused reload (HTTP 422): the error, and
// each problem of the file on its own line (file:line: path: message).
type ReloadError struct {
	Error    string   `json:"error"`
	Problems []string `json:"problems"`
}

// ErrNotFound matches (errors.Is) an APIError with HTTP 404.
var ErrNotFound = errors.New("admin: not found")

// operatorRoutes registers the operator's endpoints on api.
func (h *handler) operatorRoutes(api *http.ServeMux) {
	api.HandleFunc("GET /api/v1/upstreams", h.withOperator(func(w http.ResponseWriter, _ *http.Request, op Operator) {
		list := op.Upstreams()
		if list == nil {
			list = []session.Upstream{}
		}
		writeJSON(w, http.StatusOK, UpstreamList{Upstreams: list})
	}))
	api.HandleFunc("GET /api/v1/accounts", h.withOperator(func(w http.ResponseWriter, _ *http.Request, op Operator) {
		list := op.Accounts()
		if list == nil {
			list = []session.Account{}
		}
		writeJSON(w, http.StatusOK, AccountList{Accounts: list})
	}))
	api.HandleFunc("POST /api/v1/upstreams/drain", h.switchCall("drain", "upstream", func(op Operator, n string) (bool, int, error) {
		ch, err := op.DrainUpstream(n)
		return ch, 0, err
	}))
	api.HandleFunc("POST /api/v1/upstreams/resume", h.switchCall("resume", "upstream", func(op Operator, n string) (bool, int, error) {
		ch, err := op.ResumeUpstream(n)
		return ch, 0, err
	}))
	api.HandleFunc("POST /api/v1/accounts/disable", h.switchCall("disable", "account", Operator.DisableAccount))
	api.HandleFunc("POST /api/v1/accounts/enable", h.switchCall("enable", "account", func(op Operator, n string) (bool, int, error) {
		ch, err := op.EnableAccount(n)
		return ch, 0, err
	}))
	api.HandleFunc("POST /api/v1/reload", h.reload)
}

// withOperator answers 501 without Config.Operator, else calls f.
func (h *handler) withOperator(f func(http.ResponseWriter, *http.Request, Operator)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.Operator == nil {
			writeError(w, http.StatusNotImplemented, "no operator is attached to this admin API")
			return
		}
		f(w, r, h.cfg.Operator)
	}
}

// switchCall is the handler of one switch on a named upstream or account
// (what): a name the proxy does not know is 404.
func (h *handler) switchCall(action, what string, do func(Operator, string) (bool, int, error)) http.HandlerFunc {
	return h.withOperator(func(w http.ResponseWriter, r *http.Request, op Operator) {
		var req NameRequest
		if !readJSON(w, r, &req) {
			return
		}
		if req.Name == "" {
			writeError(w, http.StatusBadRequest, "name is required")
			return
		}
		changed, closed, err := do(op, req.Name)
		if err != nil {
			if errors.Is(err, session.ErrNoSuchUpstream) || errors.Is(err, session.ErrNoSuchAccount) {
				writeError(w, http.StatusNotFound, fmt.Sprintf("no %s %q", what, req.Name))
				return
			}
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		h.log.Warn("operator switch", "action", action, what, req.Name, "changed", changed, "closed", closed, "remote", r.RemoteAddr)
		writeJSON(w, http.StatusOK, Switched{Name: req.Name, Action: action, Changed: changed, Closed: closed})
	})
}

func (h *handler) reload(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Reload == nil {
		writeError(w, http.StatusNotImplemented, "reload is not available on this admin API")
		return
	}
	var req struct{}
	if r.ContentLength != 0 && !readJSON(w, r, &req) {
		return
	}
	h.log.Info("configuration reload asked", "remote", r.RemoteAddr)
	res, err := h.cfg.Reload(r.Context())
	if err != nil {
		problems := strings.Split(strings.TrimSpace(err.Error()), "\n")
		writeJSON(w, http.StatusUnprocessableEntity, ReloadError{
			Error:    "configuration not applied, nothing changed:\n" + strings.Join(problems, "\n"),
			Problems: problems,
		})
		return
	}
	if res.Applied == nil {
		res.Applied = []string{}
	}
	writeJSON(w, http.StatusOK, res)
}

// Upstreams lists the proxy's upstreams.
func (c *Client) Upstreams(ctx context.Context) ([]session.Upstream, error) {
	var out UpstreamList
	err := c.do(ctx, http.MethodGet, "/api/v1/upstreams", nil, nil, &out)
	return out.Upstreams, err
}

// Accounts lists the proxy's accounts.
func (c *Client) Accounts(ctx context.Context) ([]session.Account, error) {
	var out AccountList
	err := c.do(ctx, http.MethodGet, "/api/v1/accounts", nil, nil, &out)
	return out.Accounts, err
}

// Switch drains or resumes an upstream, or disables or enables an
// account: action is "drain", "resume" (an upstream) or "disable",
// "enable" (an account).
func (c *Client) Switch(ctx context.Context, action, name string) (Switched, error) {
	var path string
	switch action {
	case "drain", "resume":
		path = "/api/v1/upstreams/" + action
	case "disable", "enable":
		path = "/api/v1/accounts/" + action
	default:
		return Switched{}, fmt.Errorf("admin: unknown switch %q", action)
	}
	var out Switched
	err := c.do(ctx, http.MethodPost, path, nil, NameRequest{Name: name}, &out)
	return out, err
}

// Reload asks the proxy to re-read its configuration file. A file that
// does not parse or validate is an *APIError with HTTP 422 whose Message
// lists the problems.
func (c *Client) Reload(ctx context.Context) (Reloaded, error) {
	var out Reloaded
	err := c.do(ctx, http.MethodPost, "/api/v1/reload", nil, struct{}{}, &out)
	return out, err
}
