package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"

	"github.com/smppproxy/smppproxy/admin"
)

// keys resolve --message-id with an id that another live record of the
// upstream holds is refused by the admin API (409) and the CLI, naming that
// record; the unknown record stays unknown.
func TestCLIKeysResolveRefusesAMessageIDAnotherRecordHolds(t *testing.T) {
	smsc := subprocessSMSC(t, dropLost)
	p := startOps(t, smsc.Addr(), opsOptions{})
	c := dialAs(t, p.listen, "secret", smpp.BindTransceiver)
	held := submit(t, c, "otp-1", "code 1")
	if held.Status != 0 || held.MessageID == "" {
		t.Fatalf("submit otp-1 = %+v, want accepted", held)
	}
	if r := submit(t, c, "lost-1", "code 2"); r.Status != 0x08 {
		t.Fatalf("submit without an upstream answer: status %v, want 0x08 (unknown)", r.Status)
	}
	_, err := runCLI(t, "keys", "resolve", "shop", "lost-1", "--message-id", held.MessageID, "--admin", p.adminURL)
	if err == nil {
		t.Fatalf("keys resolve with the id of another record succeeded")
	}
	for _, want := range []string{"409", `account "shop"`, `key "otp-1"`, held.MessageID} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("keys resolve error %q lacks %s", err, want)
		}
	}
	var shown admin.RecordList
	if err := json.Unmarshal([]byte(mustCLI(t, "keys", "show", "shop", "lost-1", "--json", "--admin", p.adminURL)), &shown); err != nil {
		t.Fatal(err)
	}
	if len(shown.Records) != 1 || shown.Records[0].State != "unknown" || shown.Records[0].MessageID != "" {
		t.Errorf("lost-1 after the refused resolve = %+v, want unknown without a message id", shown.Records)
	}
}
