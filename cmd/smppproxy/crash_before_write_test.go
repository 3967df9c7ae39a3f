package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
	"github.com/smppproxy/smppproxy/state"
)

// killBeforeWriteEnv, set to N in the environment of a child run as
// `smppproxy` (see TestMain), makes it kill itself (SIGKILL) right before
// the socket write of the batch that brings the submits it wrote to an
// upstream to N or more, having written the keys of that batch's submits,
// one a line, to the file named by killBeforeWriteKeysEnv. A batch of
// another session that comes after it waits for the kill, unwritten.
const (
	killBeforeWriteEnv     = "SMPPPROXY_TEST_KILL_BEFORE_WRITE"
	killBeforeWriteKeysEnv = "SMPPPROXY_TEST_KILL_BEFORE_WRITE_KEYS"
)

// killBeforeWriteFromEnv installs the smppclient.BeforeWrite hook that
// killBeforeWriteEnv asks for, if it is set. The submits of the batch the
// process dies before are recorded (state sent, their upstream session and
// sequence durable) and none of their bytes reached the socket.
func killBeforeWriteFromEnv() {
	v := os.Getenv(killBeforeWriteEnv)
	if v == "" {
		return
	}
	n, err := strconv.Atoi(v)
	keysPath := os.Getenv(killBeforeWriteKeysEnv)
	if err != nil || n < 1 || keysPath == "" {
		fmt.Fprintf(os.Stderr, "%s=%q: want a number of submits, at least 1, and a file in %s\n", killBeforeWriteEnv, v, killBeforeWriteKeysEnv)
		os.Exit(2)
	}
	var submits atomic.Int64
	smppclient.BeforeWrite = func(batch []byte, count int) {
		if count == 0 {
			return
		}
		total := submits.Add(int64(count))
		switch {
		case total < int64(n):
			return
		case total-int64(count) >= int64(n):
			select {} // a batch behind the one that crossed N: the kill comes first
		}
		err := os.WriteFile(keysPath, []byte(strings.Join(submitKeys(batch), "\n")), 0o600)
		var self *os.Process
		if err == nil {
			self, err = os.FindProcess(os.Getpid())
		}
		if err == nil {
			err = self.Signal(os.Kill)
		}
		if err == nil {
			select {} // the process dies before this writer runs on
		}
		fmt.Fprintf(os.Stderr, "kill before write failed: %v\n", err)
		os.Exit(3) // no write either; the test fails on this exit status
	}
}

// submitKeys is the keys, as the simulator counts them, of the submit_sm
// frames in batch (frames back to back).
func submitKeys(batch []byte) []string {
	var keys []string
	for len(batch) >= smpp.HeaderLen {
		h := smpp.ParseHeader(batch)
		if h.Length < smpp.HeaderLen || int(h.Length) > len(batch) {
			break
		}
		frame := batch[:h.Length]
		batch = batch[h.Length:]
		if h.ID != smpp.CmdSubmitSM {
			continue
		}
		if sub, err := smpp.ParseSubmit(frame); err == nil {
			keys = append(keys, sim.KeyOf(sub, smpp.DefaultIdempotencyTag))
		}
	}
	return keys
}

// `smppproxy serve` dies (SIGKILL) under windowed load exactly between the
// durable create of a batch of submits and their write to the upstream
// socket; after the restart the ESME retries every key. The submits of
// that batch are unknown and held (ESME_RSYSERR, again on a second retry):
// they reach the SMSC neither before the crash nor after the restart, and
// the store has them unknown with the upstream session and sequence they
// were about to be written with. No key reaches the SMSC twice, and every
// key the ESME saw acknowledged keeps its message id.
func TestKilledBetweenCreateAndUpstreamWriteNeverSendsTwice(t *testing.T) {
	smsc, dir, listen, cfgPath, logPath := crashRig(t)
	keysPath := filepath.Join(dir, "killed-batch")
	const keys, killAt = 400, 150
	p := startServeEnv(t, cfgPath, logPath, []string{
		fmt.Sprintf("%s=%d", killBeforeWriteEnv, killAt),
		killBeforeWriteKeysEnv + "=" + keysPath,
	})
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()

	// Load: 4 senders, windowed, each sending its keys until the proxy is
	// gone. Every key is a submit written upstream unless the proxy died
	// first, so the kill comes before the load runs out.
	c := dialReady(t, listen)
	var load keyLoad
	wait := load.start(c, keys, func(_ int, _ esme.Resp, err error) bool { return err == nil })
	loadDone := make(chan struct{})
	go func() { wait(); close(loadDone) }()
	var err error
	select {
	case err = <-exited:
	case <-loadDone:
		if load.count() == keys {
			t.Fatalf("all %d keys acknowledged: the proxy was not killed before the write of submit %d", keys, killAt)
		}
		select {
		case err = <-exited:
		case <-time.After(60 * time.Second):
			t.Fatalf("the load stopped with %d of %d keys acknowledged but the proxy did not die", load.count(), keys)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the proxy was not killed before the write of submit %d", killAt)
	}
	if !killedBySIGKILL(err) {
		logText, _ := os.ReadFile(logPath)
		t.Fatalf("the proxy ended with %v, want killed by SIGKILL before a write; log tail:\n%s", err, tail(string(logText), 20))
	}
	<-loadDone
	c.Close()
	ackedAtCrash := load.count()
	b, err := os.ReadFile(keysPath)
	if err != nil || len(b) == 0 {
		t.Fatalf("the keys of the batch never written: %q, %v", b, err)
	}
	// The SMSC counts a submit without a key TLV (the proxy does not
	// forward it) by its destination and text: each key has its own.
	keyOf := map[string]int{}
	for i := range keys {
		keyOf[smscKey(i)] = i
	}
	var neverWritten []int
	for _, k := range strings.Split(string(b), "\n") {
		i, ok := keyOf[k]
		if !ok {
			t.Fatalf("the batch never written holds %q, a submit of no key of the load", k)
		}
		neverWritten = append(neverWritten, i)
	}

	// Restart on the same store, without the hook, and retry every key.
	p2 := startServe(t, cfgPath, logPath)
	c2 := dialReady(t, listen)
	defer c2.Close()
	unknown := map[int]bool{}
	for i := range keys {
		if load.retryUntilFinal(t, c2, i, "after the restart") {
			unknown[i] = true
		}
	}
	for _, i := range neverWritten {
		if !unknown[i] {
			t.Errorf("key %d, recorded but never written before the crash, was not answered unknown after the restart", i)
		}
		// Held: retried again, it is still unknown.
		if r, err := sendKey(c2, i); err != nil || r.Status != smpp.StatusSysErr {
			t.Errorf("second retry of held key %d = %+v, %v; want ESME_RSYSERR", i, r, err)
		}
		if n := smsc.Count(smscKey(i)); n != 0 {
			t.Errorf("key %d, recorded but never written before the crash, reached the SMSC %d times", i, n)
		}
	}
	load.mu.Lock()
	for i := range load.acked {
		if n := smsc.Count(smscKey(i)); n != 1 {
			t.Errorf("key %d, acknowledged before the crash, reached the SMSC %d times, want once", i, n)
		}
	}
	load.mu.Unlock()
	if d := smsc.Duplicates(); len(d) > 0 {
		t.Errorf("keys that reached the SMSC twice: %v", d)
	}
	if smsc.Total() > keys {
		t.Errorf("SMSC received %d submits for %d keys", smsc.Total(), keys)
	}
	t.Logf("acked before the crash: %d of %d; killed before writing %v; unknown after the restart: %d; SMSC received %d",
		ackedAtCrash, keys, neverWritten, len(unknown), smsc.Total())

	// The store agrees: each is unknown, journaled on the upstream session
	// and sequence it was about to be written with.
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, p2, 15*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	st, err := state.OpenBadger(state.BadgerOptions{Path: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatalf("open the store after exit: %v", err)
	}
	defer st.Close()
	for _, i := range neverWritten {
		rec, err := st.Get(context.Background(), state.Key{Account: "shop", Key: fmt.Sprintf("k:pay-%d", i)})
		if err != nil || rec.State != state.Unknown || rec.Session == "" || rec.Sequence == 0 {
			t.Errorf("key %d, recorded but never written: store has %+v, %v; want unknown with its session and sequence", i, rec, err)
		}
	}
}

// smscKey is what the SMSC simulator counts the submits of key i of the
// load (sendKey) under, the proxy having dropped the key TLV.
func smscKey(i int) string {
	sub, err := smpp.ParseSubmit(esme.Submit{Src: "SHOP", Dst: "447700900001", Text: []byte(fmt.Sprintf("payment notice %d", i))}.Frame(1))
	if err != nil {
		panic(err)
	}
	return sim.KeyOf(sub, smpp.DefaultIdempotencyTag)
}

// killedBySIGKILL tells whether a child's Wait returned err because
// SIGKILL ended it.
func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
