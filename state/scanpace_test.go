package state

import (
	"testing"
	"time"
)

// The scan that counts records by state repeats on its period while it is
// short, and no more than 5% of the time when it is long: a store of
// millions of records is not scanned back to back.
func TestRecordScansTakeAtMostAShareOfTheTime(t *testing.T) {
	for _, c := range []struct {
		every, took, want time.Duration
	}{
		{time.Minute, 50 * time.Millisecond, time.Minute},
		{time.Minute, 3 * time.Second, time.Minute},
		{time.Minute, 6 * time.Second, 2 * time.Minute},
		{time.Second, 10 * time.Second, 200 * time.Second},
	} {
		if got := nextScan(c.every, c.took); got != c.want {
			t.Errorf("nextScan(every %v, a scan of %v) = %v, want %v", c.every, c.took, got, c.want)
		}
	}
}
