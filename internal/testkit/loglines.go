package testkit

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
)

// LogLines is a slog.Handler for tests of log volume: it counts records by
// message and keeps the "suppressed" attribute (the count of lines a
// logx.Limiter held back) of the last record of each message. Safe for
// concurrent use.
type LogLines struct {
	mu         sync.Mutex
	n          map[string]int
	suppressed map[string]int64
}

// NewLogLines returns an empty LogLines.
func NewLogLines() *LogLines {
	return &LogLines{n: map[string]int{}, suppressed: map[string]int64{}}
}

// Enabled reports true: every level counts.
func (h *LogLines) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs returns h: attributes do not change what is counted.
func (h *LogLines) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup returns h.
func (h *LogLines) WithGroup(string) slog.Handler { return h }

// Handle counts r under its message.
func (h *LogLines) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Message]++
	h.suppressed[r.Message] = 0
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "suppressed" {
			h.suppressed[r.Message] = a.Value.Int64()
		}
		return true
	})
	return nil
}

// Count returns how many records had message msg, and the "suppressed"
// attribute of the last of them (0 when it had none).
func (h *LogLines) Count(msg string) (n int, suppressed int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg], h.suppressed[msg]
}

// Buffer is a bytes.Buffer that a logger's goroutines and a test may share:
// give it to slog.NewTextHandler or NewJSONHandler and read String.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (w *Buffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// String returns everything written so far.
func (w *Buffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
