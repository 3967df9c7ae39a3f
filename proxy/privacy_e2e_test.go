package proxy

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

// The store never holds message text: not the submit (hashes only), not the
// start of the message that the SMSC echoes in the receipt's text: field
// (dropped on intake), even while the receipt waits in the durable queue
// for an ESME that is not bound.
func TestOTPNeverReachesTheStore(t *testing.T) {
	const otp = "918273"
	smsc := startSim(t, sim.Config{DLRDelay: 10 * time.Millisecond})
	cfg := receiptConfig(t, smsc.Addr())
	dir := cfg.Store.Path
	app, _ := startReceiptsProxy(t, cfg)
	tx := bindESME(t, app.Addr(), "shop", smpp.BindTransmitter, false) // nobody receives: the receipt is queued
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := tx.Submit(ctx, esme.Submit{Src: "SHOP", Dst: "447700900123", Text: []byte("Code " + otp), Key: "otp-priv", RegisteredDelivery: 1})
	if err != nil || r.Status != 0 {
		t.Fatalf("submit = %+v, %v", r, err)
	}
	waitFor(t, 5*time.Second, "the receipt reached the SMSC's log of sent receipts", func() bool { return len(smsc.Sent()) > 0 })
	if !bytes.Contains(smsc.Sent()[0], []byte(otp)) {
		t.Fatalf("the simulator's receipt does not echo the message start; the test would prove nothing")
	}
	grepStore := func(when string) {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			found, err := fileContains(p, []byte(otp))
			if found {
				t.Errorf("%s: store file %s contains the OTP", when, filepath.Base(p))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	grepStore("while the receipt is queued")

	rx := bindESME(t, app.Addr(), "shop", smpp.BindReceiver, false)
	d := receive(t, rx, 1, 5*time.Second)[0]
	if bytes.Contains(d.Text, []byte(otp)) {
		t.Errorf("the ESME's receipt text %q carries the OTP", d.Text)
	}
	app.Close()
	grepStore("after close")
}

// fileContains searches f in 1 MiB chunks and stops at the first all-zero
// chunk: Badger preallocates its files, and what was written is at the
// start.
func fileContains(path string, needle []byte) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var tail []byte
	for {
		n, err := io.ReadFull(f, buf)
		chunk := buf[:n]
		if bytes.Contains(append(tail, chunk...), needle) {
			return true, nil
		}
		if n == 0 || bytes.Count(chunk, []byte{0}) == n || err != nil {
			return false, nil
		}
		tail = append(tail[:0], chunk[max(0, n-len(needle)):]...)
	}
}
