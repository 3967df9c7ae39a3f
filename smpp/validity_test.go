package smpp

import (
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	ref := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		in     string
		want   time.Time
		ok     bool
		hasErr bool
	}{
		"empty":             {"", time.Time{}, false, false},
		"relative 10 min":   {"000000001000000R", ref.Add(10 * time.Minute), true, false},
		"relative 1 day 2h": {"000001020000000R", ref.Add(26 * time.Hour), true, false},
		"absolute UTC":      {"261129130000000+", time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC), true, false},
		"absolute +1h":      {"261129130000004+", time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), true, false},
		"absolute -2h":      {"261129130000008-", time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC), true, false},
		"too short":         {"2611", time.Time{}, false, true},
		"bad suffix":        {"261129130000000X", time.Time{}, false, true},
		"bad month":         {"261329130000000+", time.Time{}, false, true},
	}
	for name, tc := range tests {
		got, ok, err := ParseTime([]byte(tc.in), ref)
		if (err != nil) != tc.hasErr || ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("%s: ParseTime(%q) = %v, %v, %v; want %v, %v, err=%v", name, tc.in, got, ok, err, tc.want, tc.ok, tc.hasErr)
		}
	}
}
