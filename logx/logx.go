// Package logx is the proxy's log hygiene: a slog.Handler wrapper that
// keeps message content and secrets out of every log line and, when asked,
// masks phone numbers; and Limiter, which rate-limits repeated lines.
//
// It is a safety net, not the policy: code must not log short_message,
// message_payload or passwords in the first place. The wrapper drops any
// attribute whose name says it holds one (text, short_message,
// message_payload, payload, udh, password, passwd, secret, token, or any name
// containing "password"), at any depth of groups, whatever its value. With
// RedactAddresses, string attributes named like an address (src, dst,
// source_addr, destination_addr, msisdn, phone, from, to, …) whose value
// looks like a phone number keep only their first three and last two
// characters.
package logx

import (
	"context"
	"log/slog"
	"strings"
)

// Options configure NewHandler.
type Options struct {
	// RedactAddresses masks phone numbers in address attributes.
	RedactAddresses bool
}

// Handler wraps a slog.Handler; see the package documentation.
type Handler struct {
	next slog.Handler
	opts Options
}

var _ slog.Handler = (*Handler)(nil)

// NewHandler returns next wrapped.
func NewHandler(next slog.Handler, opts Options) *Handler {
	return &Handler{next: next, opts: opts}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a, ok := h.clean(a); ok {
			out.AddAttrs(a)
		}
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	kept := make([]slog.Attr, 0, len(as))
	for _, a := range as {
		if a, ok := h.clean(a); ok {
			kept = append(kept, a)
		}
	}
	return &Handler{next: h.next.WithAttrs(kept), opts: h.opts}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), opts: h.opts}
}

// clean returns a with its content made safe, or false to drop it.
func (h *Handler) clean(a slog.Attr) (slog.Attr, bool) {
	if Forbidden(a.Key) {
		return a, false
	}
	a.Value = a.Value.Resolve()
	switch a.Value.Kind() {
	case slog.KindGroup:
		var kept []slog.Attr
		for _, g := range a.Value.Group() {
			if g, ok := h.clean(g); ok {
				kept = append(kept, g)
			}
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(kept...)}, true
	case slog.KindString:
		if h.opts.RedactAddresses && addressKey(a.Key) {
			return slog.String(a.Key, MaskAddress(a.Value.String())), true
		}
	}
	return a, true
}

// forbidden are attribute names that carry message content or secrets.
var forbidden = map[string]bool{
	"text": true, "short_message": true, "message_payload": true, "payload": true,
	"udh": true, "sm": true, "message_text": true, "body": true, "content": true,
	"password": true, "passwd": true, "pwd": true, "secret": true, "token": true,
	"otp": true, "code": true,
}

// Forbidden reports whether an attribute named key is dropped.
func Forbidden(key string) bool {
	k := strings.ToLower(key)
	return forbidden[k] || strings.Contains(k, "password")
}

// addresses are attribute names that may hold a phone number.
var addresses = map[string]bool{
	"src": true, "dst": true, "source": true, "destination": true,
	"source_addr": true, "destination_addr": true, "src_addr": true, "dst_addr": true,
	"dest": true, "dest_addr": true, "msisdn": true, "phone": true, "number": true,
	"from": true, "to": true, "sender": true, "recipient": true, "originator": true,
}

func addressKey(key string) bool { return addresses[strings.ToLower(key)] }

// MaskAddress masks s when it looks like a phone number (an optional "+"
// and at least five digits, possibly separated by spaces or dashes): only
// its first three and last two characters are kept. Anything else (an
// alphanumeric sender id, an empty string) is returned unchanged.
func MaskAddress(s string) string {
	digits := 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '+' || c == ' ' || c == '-':
		default:
			return s
		}
	}
	if digits < 5 {
		return s
	}
	b := []byte(s)
	for i := 3; i < len(b)-2; i++ {
		b[i] = '*'
	}
	return string(b)
}
