package smpp

import (
	"fmt"
	"strconv"
	"time"
)

// ParseTime decodes an SMPP v3.4 time field (§7.1.1), as used by
// validity_period and schedule_delivery_time: "YYMMDDhhmmsstnnp" where p is
// '+' or '-' for an absolute time nn quarter hours ahead of or behind UTC,
// or 'R' for a time relative to ref (YY years, MM months, DD days, hh:mm:ss).
// An empty field returns the zero time and ok=false.
func ParseTime(s []byte, ref time.Time) (t time.Time, ok bool, err error) {
	if len(s) == 0 {
		return time.Time{}, false, nil
	}
	if len(s) != 16 {
		return time.Time{}, false, fmt.Errorf("smpp: time field %q: want 16 characters", s)
	}
	var n [7]int
	for i := range n {
		v, err := strconv.Atoi(string(s[2*i : 2*i+2]))
		if err != nil || v < 0 {
			return time.Time{}, false, fmt.Errorf("smpp: time field %q: not digits", s)
		}
		n[i] = v
	}
	// n: YY MM DD hh mm ss, then "tn" (tenths) and "n" via the next pair.
	tenths := int(s[12] - '0')
	nn, err := strconv.Atoi(string(s[13:15]))
	if err != nil || tenths < 0 || tenths > 9 {
		return time.Time{}, false, fmt.Errorf("smpp: time field %q: bad tenths or offset", s)
	}
	switch s[15] {
	case 'R':
		return ref.AddDate(n[0], n[1], n[2]).Add(time.Duration(n[3])*time.Hour + time.Duration(n[4])*time.Minute + time.Duration(n[5])*time.Second), true, nil
	case '+', '-':
		if n[1] < 1 || n[1] > 12 || n[2] < 1 || n[2] > 31 || n[3] > 23 || n[4] > 59 || n[5] > 59 || nn > 48 {
			return time.Time{}, false, fmt.Errorf("smpp: time field %q: out of range", s)
		}
		off := time.Duration(nn) * 15 * time.Minute
		local := time.Date(2000+n[0], time.Month(n[1]), n[2], n[3], n[4], n[5], tenths*100_000_000, time.UTC)
		if s[15] == '+' {
			return local.Add(-off), true, nil
		}
		return local.Add(off), true, nil
	}
	return time.Time{}, false, fmt.Errorf("smpp: time field %q: last character must be +, - or R", s)
}
