package config

import (
	"strings"
	"testing"
)

// dlr_window defaults to 10 deliver_sm awaiting their response per
// receiving session, takes the value given, and refuses less than 1.
func TestDLRWindow(t *testing.T) {
	if got := mustParse(t, base).Account("shop").DLRWindow; got != 10 {
		t.Errorf("dlr_window by default = %d, want 10", got)
	}
	if got := mustParse(t, base+"    dlr_window: 100\n").Account("shop").DLRWindow; got != 100 {
		t.Errorf("dlr_window: 100 = %d, want 100", got)
	}
	errs := parseErrors(t, base+"    dlr_window: 0\n")
	if len(errs) != 1 || errs[0].Path != "accounts[0].dlr_window" || !strings.Contains(errs[0].Msg, "at least 1") {
		t.Errorf("dlr_window: 0 → %+v, want one error at accounts[0].dlr_window: at least 1", errs)
	}
}
