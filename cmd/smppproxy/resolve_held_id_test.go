package main

import (
	"encoding/json"
	"github.com/smppproxy/smppproxy/smpp"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/sim"
)

// keys resolve --message-id with an id that another live record of the
// upstream holds is refused by the admin API (409) and the CLI, naming that
// record; the unknown record stays unknown.
func TestCLIKeysResolveRefusesAMessageIDAnotherRecordHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	smsc, err := sim.Start("127.0.0.1:0", sim.Config{Fault: func(c sim.Call) sim.Action {
		return sim.Action{Drop: strings.HasPrefix(c.Key, "lost")}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer smsc.Close()
	p := startOps(t, smsc.Addr(), opsOptions{})
	c := dialAs(t, p.listen, "secret", smpp.BindTransceiver)
	held := submit(t, c, "otp-1", "code 1")
	if held.Status != 0 || held.MessageID == "" {
		t.Fatalf("submit otp-1 = %+v, want accepted", held)
	}
	if r := submit(t, c, "lost-1", "code 2"); r.Status != 0x08 {
		t.Fatalf("submit without an upstream answer: status %v, want 0x08 (unknown)", r.Status)
	}
	_, err = runCLI(t, "keys", "resolve", "shop", "lost-1", "--message-id", held.MessageID, "--admin", p.adminURL)
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
