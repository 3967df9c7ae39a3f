package admin_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// chromiumPath is Debian's chromium, which .ci/run installs.
const chromiumPath = "/usr/bin/chromium"

// browserTimeout bounds one browser test (start, pages, screenshots).
const browserTimeout = 60 * time.Second

// browser is a headless chromium driven over the DevTools protocol, with
// every console message the pages write.
type browser struct {
	ctx context.Context

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

// startBrowser starts headless chromium for the test, or skips it when
// there is none (fails with SMPPPROXY_REQUIRE_BROWSER=1).
func startBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("SMPPPROXY_REQUIRE_BROWSER") == "1" {
			t.Fatalf("SMPPPROXY_REQUIRE_BROWSER=1 but no browser: %v (apt-get install chromium)", err)
		}
		t.Skipf("no browser at %s (apt-get install chromium): the status page is not tested in a browser", chromiumPath)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1100, 900),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
	}
	ctx, cancelTimeout := context.WithTimeout(context.Background(), browserTimeout)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc(); cancelTimeout() })
	// The first action starts the browser, for as long as bctx lives.
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	b := &browser{ctx: bctx}
	cctx, stop := context.WithCancel(bctx)
	done := make(chan struct{})
	messages := chromedp.Console(cctx)
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	return b
}

// do runs actions, failing the test with what on error.
func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		t.Fatalf("%s: %v (console: %v)", what, err, b.messages())
	}
}

// text is the text of the first element sel selects.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// eval evaluates a JavaScript expression of a boolean in the page.
func (b *browser) eval(t *testing.T, expr string) bool {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func (b *browser) messages() []chromedp.ConsoleMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]chromedp.ConsoleMessage(nil), b.console...)
}

// wantNoConsoleErrors fails the test on any error or warning the pages
// wrote (an exception, a CSP violation, a failed load).
func (b *browser) wantNoConsoleErrors(t *testing.T) {
	t.Helper()
	for _, m := range b.messages() {
		if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
			t.Errorf("console %s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line)
		}
	}
}

// screenshot keeps a PNG of the page as a test artefact: under
// $SMPPPROXY_TEST_ARTIFACTS when set, else in the test's temporary
// directory.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("SMPPPROXY_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// The status page, opened in a real browser without a token, shows the
// bound ESME session (its account and id) and the upstream as bound, with
// no console error (a CSP violation or a script error would be one), and
// stays one readable column on a phone's width.
func TestStatusPageInABrowserShowsTheBoundSessionAndTheUpstream(t *testing.T) {
	b := startBrowser(t)
	s := startStackWith(t, func(c *admin.Config) { c.Status = nil })
	s.submit(t, "ok-1")
	s.submit(t, "lost-1") // an unknown record: the phone's view shows its resolve form
	var id string
	for _, si := range s.app.Sessions.List() {
		if si.Owner == proxytest.SystemID {
			id = si.ID
		}
	}
	b.do(t, "open the status page", chromedp.Navigate(s.admin.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#esme-sessions tbody tr`)))
	if b.eval(t, `document.getElementById('token-form').offsetParent !== null`) {
		t.Errorf("the token form shows on an admin endpoint without a token")
	}
	row := b.text(t, `#esme-sessions tbody tr`)
	if !strings.Contains(row, proxytest.SystemID) || !strings.Contains(row, id) {
		t.Errorf("session row %q, want account %s and session %s", row, proxytest.SystemID, id)
	}
	if up := b.text(t, `tr[data-upstream="`+proxytest.Upstream+`"]`); !strings.Contains(up, "bound") {
		t.Errorf("upstream row %q, want %s bound", up, proxytest.Upstream)
	}
	// The script's refresh replaces the sections without an error: wait
	// for it to say so.
	b.do(t, "refresh", chromedp.Poll[chromedp.Void](`document.getElementById('updated').textContent.startsWith('updated')`, chromedp.WithPollingTimeout(15*time.Second)))
	if body := b.text(t, "body"); strings.Contains(body, "hello") || strings.Contains(body, proxytest.Password) {
		t.Errorf("the page shows message text or a password: %q", body)
	}
	b.screenshot(t, "status-desktop")

	b.do(t, "phone width", chromedp.EmulateViewport(390, 844), chromedp.Navigate(s.admin.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#upstreams`)))
	if wide := b.eval(t, `document.documentElement.scrollWidth > window.innerWidth`); wide {
		t.Errorf("on a 390px screen the page is wider than the screen")
	}
	if shown := b.eval(t, `getComputedStyle(document.querySelector('#esme-sessions thead')).display !== 'none'`); shown {
		t.Errorf("on a 390px screen the tables keep their header row, want one card per row")
	}
	b.screenshot(t, "status-phone")
	b.wantNoConsoleErrors(t)
}

// With a token configured, the page shows the token form and no data
// until the token is given; then the data, and the resolve action of an
// unknown record works from the page (bearer token, JSON).
func TestStatusPageInABrowserAsksForTheTokenAndResolvesAnUnknownRecord(t *testing.T) {
	const token = "s3cret-t0ken"
	b := startBrowser(t)
	s := startStack(t, token)
	if r := s.submit(t, "lost-1"); r.Status != smpp.StatusSysErr {
		t.Fatalf("submit of a dropped key: status %v, want ESME_RSYSERR (unknown)", r.Status)
	}
	id := s.app.Sessions.List()[0].ID

	b.do(t, "open the status page", chromedp.Navigate(s.admin.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#token-form`)))
	html, err := chromedp.Run(b.ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{id, "lost-1", proxytest.Upstream + "</td>", `data-account`} {
		if strings.Contains(html, secret) {
			t.Errorf("before the token, the page holds %q:\n%s", secret, html)
		}
	}
	if !b.eval(t, `document.getElementById('status').children.length === 0 && document.getElementById('token-form').offsetParent !== null`) {
		t.Errorf("before the token: want the token form shown and no sections")
	}
	b.screenshot(t, "status-token-form")

	b.do(t, "give the token", chromedp.SendKeys(chromedp.CSS(`#token`), token), chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#esme-sessions tbody tr`)))
	if row := b.text(t, `#esme-sessions tbody tr`); !strings.Contains(row, id) {
		t.Errorf("session row %q after the token, want %s", row, id)
	}
	if b.eval(t, `document.getElementById('token-form').offsetParent !== null`) {
		t.Errorf("the token form still shows once the token is given")
	}
	if row := b.text(t, `#unknown tbody tr`); !strings.Contains(row, "lost-1") {
		t.Errorf("unknown row %q, want lost-1", row)
	}
	b.screenshot(t, "status-with-token")

	// The page asks for a confirmation: answer yes.
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`window.confirm = () => true, true`)); err != nil {
		t.Fatal(err)
	}
	b.do(t, "resolve lost-1 as accepted",
		chromedp.SendKeys(chromedp.CSS(`#unknown form.resolve input[name=message_id]`), "4242"),
		chromedp.Click(chromedp.CSS(`#unknown form.resolve button[value=accepted]`)),
		chromedp.WaitVisible(`//section[@id="unknown"]//p[contains(., "None waiting")]`))
	rec, err := s.app.Store().Get(t.Context(), state.Key{Account: proxytest.SystemID, Key: "k:lost-1"})
	if err != nil || rec.State != state.Accepted || rec.MessageID != "4242" {
		t.Fatalf("record after the page's resolve: %+v, %v; want accepted as 4242", rec, err)
	}
	b.wantNoConsoleErrors(t)
}
