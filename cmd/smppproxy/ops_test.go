package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
)

// Subprocess tests of operations (admin CLI, metrics, logs): `smppproxy
// serve` runs as a child (see subprocess_test.go) on real TCP and a
// real Badger directory; the admin commands run in process against its
// admin API.

// opsOptions shape the child's configuration.
type opsOptions struct {
	logFormat       string // "" = text
	logLevel        string // "" = info
	password        string // the account's password ("" = "secret")
	upstreamPass    string // "" = "pw"
	token           string // admin token written to a token file; "" = none
	shutdownTimeout time.Duration
	responseTimeout time.Duration
	adminAddr       string // "" = a free port
}

// opsProxy is a running child with what the tests need to reach it.
type opsProxy struct {
	*proxyProcess
	dir, listen, adminURL, logPath, tokenFile string
}

// startOps starts the simulator's child proxy. The simulator sees the key
// TLV (forward_key_tlv) so that faults can be keyed.
func startOps(t *testing.T, smsc string, o opsOptions) *opsProxy {
	t.Helper()
	// A port freePort gave may be taken by another process before the
	// child listens on it: the child then exits, and it starts again on
	// other ports.
	for attempt := 1; ; attempt++ {
		notify, env := childNotify(t)
		p := startOpsOnce(t, smsc, o, env)
		if waitReady(t, p.adminURL, p.logPath, notify) {
			return p
		}
		if attempt == 3 {
			log, _ := os.ReadFile(p.logPath)
			t.Fatalf("the proxy found its ports taken three times; the last log:\n%s", log)
		}
		_ = p.cmd.Process.Kill()
		_, _ = p.cmd.Process.Wait()
	}
}

// startOpsOnce starts the child on ports freePort gives (see startOps).
func startOpsOnce(t *testing.T, smsc string, o opsOptions, env []string) *opsProxy {
	t.Helper()
	if o.logFormat == "" {
		o.logFormat = "text"
	}
	if o.logLevel == "" {
		o.logLevel = "info"
	}
	if o.password == "" {
		o.password = "secret"
	}
	if o.upstreamPass == "" {
		o.upstreamPass = "pw"
	}
	if o.shutdownTimeout == 0 {
		o.shutdownTimeout = 5 * time.Second
	}
	if o.responseTimeout == 0 {
		o.responseTimeout = 300 * time.Millisecond
	}
	dir := t.TempDir()
	p := &opsProxy{dir: dir, listen: freePort(t), logPath: filepath.Join(dir, "proxy.log")}
	adminAddr := o.adminAddr
	if adminAddr == "" {
		adminAddr = freePort(t)
	}
	p.adminURL = "http://" + adminAddr
	tokenLine := ""
	if o.token != "" {
		p.tokenFile = filepath.Join(dir, "admin.token")
		if err := os.WriteFile(p.tokenFile, []byte(o.token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		tokenLine = fmt.Sprintf("\n  token_file: %q", p.tokenFile)
	}
	cfg := fmt.Sprintf(`listen:
  address: %q
  bind_timeout: 5s
admin:
  address: %q%s
store:
  path: %q
log: {format: %s, level: %s, redact_addresses: true}
shutdown_timeout: %s
`, p.listen, adminAddr, tokenLine, filepath.Join(dir, "data"), o.logFormat, o.logLevel, o.shutdownTimeout) +
		routeYAML(o.password, smsc, o.upstreamPass, fmt.Sprintf("binds: 1\nwindow: 100\nresponse_timeout: %s\nforward_key_tlv: true", o.responseTimeout))
	cfgPath := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.proxyProcess = startServeEnv(t, cfgPath, p.logPath, env, "--records-every", "100ms")
	return p
}

// childNotify listens for one child's sd_notify datagrams (as systemd
// does); env is the child's $NOTIFY_SOCKET for startServeEnv. A test that
// listens for them itself (notifySocket) gets nil: the child's datagrams
// are its own.
func childNotify(t *testing.T) (*net.UnixConn, []string) {
	t.Helper()
	if os.Getenv("NOTIFY_SOCKET") != "" {
		return nil, nil
	}
	conn, path := listenNotify(t)
	return conn, []string{"NOTIFY_SOCKET=" + path}
}

// waitReady waits until the child serves (it said READY=1 on notify,
// once its own listeners were open: a process that took its admin port
// meanwhile would answer /readyz for it; with notify nil, the test reads
// that itself) and /readyz says ready (its upstream bound). It returns
// false when the child could not listen because another process had
// taken one of its ports.
func waitReady(t *testing.T, adminURL, logPath string, notify *net.UnixConn) bool {
	t.Helper()
	up, taken := notify == nil, false
	buf := make([]byte, 4096)
	ready := testkit.Poll(30*time.Second, func() bool {
		if log, _ := os.ReadFile(logPath); bytes.Contains(log, []byte("address already in use")) {
			taken = true
			return true
		}
		for !up {
			_ = notify.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			n, err := notify.Read(buf)
			if err != nil {
				return false
			}
			up = strings.HasPrefix(string(buf[:n]), "READY=1")
		}
		resp, err := http.Get(adminURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if ready && notify != nil && !taken {
		// Read its later datagrams (RELOADING=1, STOPPING=1…) until the
		// test ends: a full socket would block the child's next one.
		_ = notify.SetReadDeadline(time.Time{})
		go func() {
			for {
				if _, err := notify.Read(buf); err != nil {
					return
				}
			}
		}()
	}
	if ready {
		return !taken
	}
	log, _ := os.ReadFile(logPath)
	t.Fatalf("proxy never became ready at %s; log:\n%s", adminURL, log)
	return false
}

// A child whose admin port another process took before it could listen
// (freePort's port is free only until then) is not taken for ready
// because that process answers /readyz: the test would then talk to a
// proxy that is not there. startOps starts it again on other ports.
func TestAChildWhoseAdminPortWasTakenIsNotTakenForReady(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})) // answers 200 to everything
	defer other.Close()
	notify, env := childNotify(t)
	if notify == nil {
		t.Skip("$NOTIFY_SOCKET is set for the whole run: the children's readiness is read by it")
	}
	smsc := subprocessSMSC(t, sim.Config{})
	p := startOpsOnce(t, smsc.Addr(), opsOptions{adminAddr: other.Listener.Addr().String()}, env)
	if waitReady(t, p.adminURL, p.logPath, notify) {
		t.Fatal("a child that could not listen on its admin port was taken for ready (another process answered /readyz)")
	}
	q := startOps(t, smsc.Addr(), opsOptions{})
	c := dialAs(t, q.listen, "secret", smpp.BindTransmitter)
	if r := submit(t, c, "after-retry", "hello"); r.Status != 0 {
		t.Errorf("submit to the proxy started on free ports = %v", r.Status)
	}
}

// runCLI runs an smppproxy command in process and returns what it printed.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, io.Discard
	err := app.Run(append([]string{"smppproxy"}, args...))
	return out.String(), err
}

// mustCLI is runCLI that fails the test on error.
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("smppproxy %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func dialAs(t *testing.T, addr, password string, bind smpp.BindType) *esme.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := esme.Dial(ctx, addr, esme.Options{SystemID: "shop", Password: password, Bind: bind, Timeout: 5 * time.Second, Window: 20})
	if err != nil {
		t.Fatalf("bind %s: %v", bind, err)
	}
	t.Cleanup(c.Close)
	return c
}

func submit(t *testing.T, c *esme.Client, key, text string) esme.Resp {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Submit(ctx, esme.Submit{Src: "SHOP", Dst: "447700900123", Key: key, Text: []byte(text)})
	if err != nil {
		t.Fatalf("submit %q: %v", key, err)
	}
	return r
}

// scrape returns the /metrics text.
func scrape(t *testing.T, adminURL, token string) string {
	t.Helper()
	resp, b := testkit.Get(t, adminURL+"/metrics", token)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics = %d %s", resp.StatusCode, b)
	}
	return b
}

// sample returns the value of one exposition line (name{labels} value),
// or "" when absent.
func sample(metrics, series string) string {
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// Two ESME sessions and one upstream: the listing shows all three, --json
// parses, kick closes exactly the session named; without the admin token
// the CLI lists and kicks nothing.
func TestCLISessionsListAndKick(t *testing.T) {
	smsc := subprocessSMSC(t, sim.Config{})
	const token = "adm-7f3c9e"
	p := startOps(t, smsc.Addr(), opsOptions{token: token})
	trx := dialAs(t, p.listen, "secret", smpp.BindTransceiver)
	tx := dialAs(t, p.listen, "secret", smpp.BindTransmitter)
	if r := submit(t, tx, "k-1", "hello"); r.Status != 0 {
		t.Fatalf("submit: %v", r.Status)
	}

	// Without the token, or with a wrong one: 401 and nothing happens.
	wrong := filepath.Join(p.dir, "wrong.token")
	if err := os.WriteFile(wrong, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, auth := range [][]string{nil, {"--token-file", wrong}} {
		args := append([]string{"sessions", "list", "--admin", p.adminURL}, auth...)
		if out, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("smppproxy %v = %q, %v; want a 401 error", args, out, err)
		}
		args = append([]string{"sessions", "kick", "--admin", p.adminURL}, auth...)
		if _, err := runCLI(t, append(args, "esme-1")...); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("smppproxy %v esme-1: %v; want a 401 error", args, err)
		}
	}

	auth := []string{"--admin", p.adminURL, "--token-file", p.tokenFile}
	table := mustCLI(t, append([]string{"sessions", "list"}, auth...)...)
	var list admin.SessionList
	if err := json.Unmarshal([]byte(mustCLI(t, append([]string{"sessions", "list", "--json"}, auth...)...)), &list); err != nil {
		t.Fatalf("sessions list --json does not parse: %v", err)
	}
	ids := map[string]string{} // local address of our client → session id
	upstreams := 0
	for _, s := range list.Sessions {
		switch s.Side {
		case "esme":
			ids[s.Remote] = s.ID
			if s.Owner != "shop" || s.State != "bound" {
				t.Errorf("ESME session %+v: want account shop, bound", s)
			}
			// Receipts pending: the account's queue (empty), for the
			// receiving session only.
			if receives := s.Bind == "TRX"; (s.ReceiptsPending != nil) != receives || (receives && *s.ReceiptsPending != 0) {
				t.Errorf("ESME session %s (%s): receipts pending %v, want 0 for TRX and none for TX", s.ID, s.Bind, s.ReceiptsPending)
			}
		case "upstream":
			upstreams++
			if s.Owner != "smsc" || s.State != "bound" || s.Window != 100 {
				t.Errorf("upstream bind %+v: want smsc, bound, window 100", s)
			}
		}
		if !strings.Contains(table, s.ID) {
			t.Errorf("the table does not show session %s:\n%s", s.ID, table)
		}
	}
	trxID, txID := ids[trx.LocalAddr().String()], ids[tx.LocalAddr().String()]
	if len(ids) != 2 || trxID == "" || txID == "" || upstreams != 1 {
		t.Fatalf("sessions = %+v; want our two ESME sessions and one upstream bind", list.Sessions)
	}
	for _, want := range []string{"ESME SESSIONS (2)", "UPSTREAM BINDS (1)", "TRX", "TX", "shop", "smsc", "RECEIPTS PENDING"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	t.Logf("smppproxy sessions list:\n%s", table)

	select {
	case <-trx.Done():
		t.Fatal("an unauthenticated kick closed a session")
	default:
	}
	out := mustCLI(t, append(append([]string{"sessions", "kick"}, auth...), trxID)...)
	if !strings.Contains(out, trxID) {
		t.Errorf("kick printed %q", out)
	}
	select {
	case <-trx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the kicked session is still open")
	}
	if r := submit(t, tx, "k-2", "hello"); r.Status != 0 {
		t.Fatalf("the other session after the kick: status %v", r.Status)
	}
	if err := json.Unmarshal([]byte(mustCLI(t, append([]string{"sessions", "list", "--json"}, auth...)...)), &list); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, s := range list.Sessions {
		if s.Side == "esme" {
			left = append(left, s.ID)
		}
	}
	if len(left) != 1 || left[0] != txID {
		t.Fatalf("ESME sessions after kicking %s: %v, want only %s", trxID, left, txID)
	}
	if _, err := runCLI(t, append(append([]string{"sessions", "kick"}, auth...), trxID)...); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("kicking a closed session: %v, want 404", err)
	}
	m := scrape(t, p.adminURL, token)
	if v := sample(m, `smppproxy_esme_sessions_closed_total{reason="kicked"}`); v != "1" {
		t.Errorf("sessions closed as kicked = %q, want 1", v)
	}
	if v := sample(m, `smppproxy_esme_sessions{account="shop",bind="TX"}`); v != "1" {
		t.Errorf("TX sessions = %q, want 1", v)
	}
}

// keys show after a replayed duplicate shows the whole
// history; keys resolve turns an unknown record into accepted and the next
// retry gets that id.
func TestCLIKeysShowAndResolve(t *testing.T) {
	smsc := subprocessSMSC(t, dropLost)
	p := startOps(t, smsc.Addr(), opsOptions{})
	c := dialAs(t, p.listen, "secret", smpp.BindTransceiver)
	first := submit(t, c, "otp-1", "code 1")
	dup := submit(t, c, "otp-1", "code 1")
	if first.Status != 0 || dup.Status != 0 || dup.MessageID != first.MessageID {
		t.Fatalf("first %+v, duplicate %+v: want the same message id", first, dup)
	}
	a := []string{"--admin", p.adminURL}

	out := mustCLI(t, append([]string{"keys", "show", "shop", "otp-1"}, a...)...)
	t.Logf("smppproxy keys show shop otp-1:\n%s", out)
	for _, want := range []string{"accepted", first.MessageID, "created", "journaled before write to smsc", "upstream answered", "HISTORY"} {
		if !strings.Contains(out, want) {
			t.Errorf("keys show lacks %q:\n%s", want, out)
		}
	}
	var shown admin.RecordList
	if err := json.Unmarshal([]byte(mustCLI(t, append([]string{"keys", "show", "shop", "otp-1", "--json"}, a...)...)), &shown); err != nil {
		t.Fatal(err)
	}
	r := shown.Records[0]
	h := r.History
	if len(h) != 2 || h[0].State != "sent" || h[0].Session == "" || h[0].Sequence == 0 ||
		h[1].State != "accepted" || h[1].MessageID != first.MessageID || h[1].Session != h[0].Session || h[1].Sequence != h[0].Sequence {
		t.Fatalf("history = %+v; want created with its journal (session, sequence), then accepted with %s on that session and sequence", h, first.MessageID)
	}

	if r := submit(t, c, "lost-1", "code 2"); r.Status != 0x08 {
		t.Fatalf("submit without an upstream answer: status %v, want 0x08 (unknown)", r.Status)
	}
	var unknown admin.RecordList
	if err := json.Unmarshal([]byte(mustCLI(t, append([]string{"keys", "list", "--state", "unknown", "--json"}, a...)...)), &unknown); err != nil {
		t.Fatal(err)
	}
	if len(unknown.Records) != 1 || unknown.Records[0].Key != "lost-1" {
		t.Fatalf("keys list --state unknown = %+v, want lost-1", unknown.Records)
	}
	t.Logf("smppproxy keys list --state unknown:\n%s", mustCLI(t, append([]string{"keys", "list", "--state", "unknown"}, a...)...))
	if _, err := runCLI(t, append([]string{"keys", "resolve", "shop", "lost-1"}, a...)...); err == nil {
		t.Fatal("keys resolve without --message-id or --not-sent succeeded")
	}
	// Flags after the arguments, as SPEC §5 writes the command.
	out = mustCLI(t, "keys", "resolve", "shop", "lost-1", "--message-id", "4242", "--by", "ops-test", "--admin", p.adminURL)
	t.Logf("smppproxy keys resolve shop lost-1 --message-id 4242:\n%s", out)
	if !strings.Contains(out, "accepted") || !strings.Contains(out, "4242") || !strings.Contains(out, "resolved by ops-test") {
		t.Errorf("keys resolve printed:\n%s", out)
	}
	retry := submit(t, c, "lost-1", "code 2")
	if retry.Status != 0 || retry.MessageID != "4242" {
		t.Fatalf("retry after resolve: status %v id %q, want 0 and 4242", retry.Status, retry.MessageID)
	}
	if n := smsc.Count("lost-1"); n != 1 {
		t.Errorf("lost-1 reached the SMSC %d times, want 1", n)
	}
	if _, err := runCLI(t, "keys", "resolve", "shop", "lost-1", "--not-sent", "--admin", p.adminURL); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("resolving an accepted record: %v, want 409", err)
	}
}

// After a scripted mix of new, duplicate, conflicting,
// unknown and keyless submits, /metrics shows each outcome exactly.
func TestMetricsCountEachOutcomeExactly(t *testing.T) {
	smsc := subprocessSMSC(t, dropLost)
	p := startOps(t, smsc.Addr(), opsOptions{})
	c := dialAs(t, p.listen, "secret", smpp.BindTransceiver)
	script := []struct {
		key, text string
		status    uint32
	}{
		{"a-1", "one", 0}, {"a-2", "two", 0}, {"a-3", "three", 0}, // forwarded ×3
		{"a-1", "one", 0}, {"a-1", "one", 0}, {"a-2", "two", 0}, // replayed ×3
		{"a-3", "other text", 0x400},                       // conflict ×1
		{"lost-1", "four", 0x08}, {"lost-1", "four", 0x08}, // unknown ×2 (owner, then the held retry)
		{"", "no key", 0}, // untracked ×1
	}
	for i, s := range script {
		if r := submit(t, c, s.key, s.text); uint32(r.Status) != s.status {
			t.Fatalf("step %d (%s %q): status %v, want 0x%02X", i, s.key, s.text, r.Status, s.status)
		}
	}
	m := scrape(t, p.adminURL, "")
	for outcome, want := range map[string]string{"forwarded": "3", "replayed": "3", "conflict": "1", "unknown": "2", "untracked": "1"} {
		series := fmt.Sprintf(`smppproxy_dedup_submits_total{account="shop",outcome="%s"}`, outcome)
		if got := sample(m, series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
	for _, absent := range []string{"joined", "rejected", "throttled", "retryable", "invalid", "store_error"} {
		if got := sample(m, fmt.Sprintf(`smppproxy_dedup_submits_total{account="shop",outcome="%s"}`, absent)); got != "" {
			t.Errorf("outcome %s = %s, want none", absent, got)
		}
	}
	if got := sample(m, `smppproxy_upstream_requests_failed_total{reason="timeout",upstream="smsc"}`); got != "1" {
		t.Errorf("upstream timeouts = %q, want 1", got)
	}
	if got := sample(m, `smppproxy_upstream_requests_written_total{upstream="smsc"}`); got != "5" {
		t.Errorf("upstream requests written = %q, want 5", got)
	}
	// Records by state: the periodic scan (every 100ms here) catches up.
	want := map[string]string{"accepted": "4", "unknown": "1", "sent": "0", "rejected": "0", "retryable": "0"}
	bad := ""
	if !testkit.Poll(5*time.Second, func() bool {
		m = scrape(t, p.adminURL, "")
		bad = ""
		for st, n := range want {
			if got := sample(m, fmt.Sprintf(`smppproxy_store_records{state="%s"}`, st)); got != n {
				bad += fmt.Sprintf(" %s=%q (want %s)", st, got, n)
			}
		}
		return bad == ""
	}) {
		t.Fatalf("records by state:%s", bad)
	}
	var st admin.Stats
	if err := json.Unmarshal([]byte(mustCLI(t, "stats", "--json", "--admin", p.adminURL)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Submits["forwarded"] != 3 || st.Submits["replayed"] != 3 || st.Submits["conflict"] != 1 || st.Submits["unknown"] != 2 || st.Records["accepted"] != 4 {
		t.Errorf("stats --json = %+v", st)
	}
	if q, ok := st.ReceiptQueue["shop"]; !ok || q != 0 {
		t.Errorf("stats --json: receipt queue %v, want shop 0", st.ReceiptQueue)
	}
	t.Logf("smppproxy stats:\n%s", mustCLI(t, "stats", "--admin", p.adminURL))
}

// A submit whose text is an OTP code, at debug level in
// JSON: neither the code, nor any password (account, upstream, a wrong one
// tried in a bind), nor the admin token, nor the full phone number appears
// in any log line. Decisions are logged with their key.
func TestLogsNeverCarryTextPasswordsOrNumbers(t *testing.T) {
	const (
		otp       = "482915"
		password  = "Pw9137xq"
		upstream  = "Up5521zk"
		wrongPass = "Wr4410qq"
		token     = "adm-tok-66120"
		number    = "447700900123"
	)
	smsc := subprocessSMSC(t, sim.Config{SystemID: "proxy", Password: upstream})
	p := startOps(t, smsc.Addr(), opsOptions{logFormat: "json", logLevel: "debug", password: password, upstreamPass: upstream, token: token})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := esme.Dial(ctx, p.listen, esme.Options{SystemID: "shop", Password: wrongPass, Timeout: 5 * time.Second}); err == nil {
		c.Close()
		t.Fatal("a bind with a wrong password succeeded")
	}
	c := dialAs(t, p.listen, password, smpp.BindTransceiver)
	for range 2 { // forwarded, then replayed
		r, err := c.Submit(ctx, esme.Submit{Src: "BANK", Dst: number, Key: "login-7", Text: []byte("Your code is " + otp)})
		if err != nil || r.Status != 0 {
			t.Fatalf("submit: %+v, %v", r, err)
		}
	}
	mustCLI(t, "keys", "show", "shop", "login-7", "--admin", p.adminURL, "--token-file", p.tokenFile)
	// SIGHUP reloads the configuration (unchanged) without dropping the
	// session; the reload's lines carry no secret either.
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var b []byte
	if !testkit.Poll(5*time.Second, func() bool {
		b, _ = os.ReadFile(p.logPath)
		return strings.Contains(string(b), `"msg":"configuration reloaded","by":"SIGHUP"`)
	}) {
		t.Fatalf("no SIGHUP answer in the log:\n%s", tail(string(b), 10))
	}
	if r, err := c.Submit(ctx, esme.Submit{Src: "BANK", Dst: number, Key: "login-7", Text: []byte("Your code is " + otp)}); err != nil || r.Status != 0 {
		t.Fatalf("submit after SIGHUP: %+v, %v", r, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, p.proxyProcess, 10*time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
	raw, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	logText := string(raw)
	lines := strings.Split(strings.TrimSpace(logText), "\n")
	for _, secret := range []string{otp, password, upstream, wrongPass, token, number} {
		for _, l := range lines {
			if strings.Contains(l, secret) {
				t.Errorf("log line carries %q: %s", secret, l)
			}
		}
	}
	for _, want := range []string{`"key":"k:login-7"`, `"outcome":"forwarded"`, "duplicate replayed", "bind refused: wrong password"} {
		if !strings.Contains(logText, want) {
			t.Errorf("log lacks %s; %d lines:\n%s", want, len(lines), tail(logText, 30))
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
