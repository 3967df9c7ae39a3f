// Package clock holds the one way the proxy waits: Sleep, a pause that
// ends early when its context does. Back-offs (bind failures, rebinds,
// route retries) use it so that a shutdown never waits out a pause.
package clock

import (
	"context"
	"time"
)

// Sleep waits d or until ctx ends, whichever comes first. A d of zero or
// less returns at once.
func Sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
