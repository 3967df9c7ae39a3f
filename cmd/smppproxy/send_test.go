package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/sim"
)

// send through the proxy: the answer's status and message id, the receipt
// with --wait-receipt, and the same key and content again is a replay
// (same id, the SMSC got one submit); without the receipt request it is
// other content (a conflict); a wrong password fails.
func TestSendPrintsTheAnswerAndTheReceipt(t *testing.T) {
	smsc := subprocessSMSC(t, sim.Config{DLRDelay: 30 * time.Millisecond})
	p := startOps(t, smsc.Addr(), opsOptions{})
	args := []string{"send", "--target", p.listen, "--system-id", "shop", "--password", "secret", "--key", "send-1",
		"--from", "SHOP", "--to", "447700900123", "--text", "héllo"}
	out := mustCLI(t, append(args, "--wait-receipt", "10s")...)
	m := regexp.MustCompile(`(?m)^status +ESME_ROK \(0x00000000\)\nmessage id +(\S+)\nreceipt +stat DELIVRD`).FindStringSubmatch(out)
	if m == nil || m[1] == "-" {
		t.Fatalf("send printed:\n%s", out)
	}
	again := mustCLI(t, append(args, "--dlr")...)
	if !strings.Contains(again, "message id  "+m[1]+"\n") {
		t.Errorf("the retry of send-1 printed:\n%s\nwant message id %s", again, m[1])
	}
	if n := smsc.Total(); n != 1 {
		t.Errorf("the SMSC got %d submits, want 1", n)
	}
	if out, err := runCLI(t, args...); err == nil || !strings.Contains(out, "SMPPPROXY_KEY_CONFLICT") {
		t.Errorf("send-1 without the receipt request: %v\n%s; want a key conflict", err, out)
	}
	bad := append([]string{}, args...)
	bad[6] = "wrong"
	if _, err := runCLI(t, bad...); err == nil {
		t.Error("send with a wrong password: no error")
	}
}
