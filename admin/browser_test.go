package admin_test

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// post sends one POST with the given Content-Type and Origin ("" = none).
func post(t *testing.T, url, contentType, origin, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, b := testkit.Do(t, req)
	return resp.StatusCode, b
}

// Without a token, what a web page can send (a form or text/plain POST, or
// any request from a foreign Origin) changes nothing: no kick, no
// resolution. The CLI's calls (JSON, no Origin) and the admin page's own
// origin still work.
func TestMutatingCallsFromABrowserChangeNothing(t *testing.T) {
	s := startStack(t, "")
	if r := s.submit(t, "lost-1"); r.Status != smpp.StatusSysErr {
		t.Fatalf("submit of a dropped key: status %v, want ESME_RSYSERR (unknown)", r.Status)
	}
	id := s.app.Sessions.List()[0].ID
	kick := `{"id":"` + id + `"}`
	resolve := `{"account":"shop","key":"lost-1","message_id":"999"}`
	self := s.admin.URL // http://127.0.0.1:PORT: the listener's own origin
	for _, tc := range []struct {
		name, path, ctype, origin, body string
		want                            int
	}{
		{"kick as text/plain", "/api/v1/sessions/kick", "text/plain", "", kick, http.StatusUnsupportedMediaType},
		{"kick without Content-Type", "/api/v1/sessions/kick", "", "", kick, http.StatusUnsupportedMediaType},
		{"kick as a form", "/api/v1/sessions/kick", "application/x-www-form-urlencoded", "", kick, http.StatusUnsupportedMediaType},
		{"resolve as text/plain", "/api/v1/keys/resolve", "text/plain;charset=UTF-8", "", resolve, http.StatusUnsupportedMediaType},
		{"resolve as multipart", "/api/v1/keys/resolve", "multipart/form-data; boundary=x", "", resolve, http.StatusUnsupportedMediaType},
		{"kick from a foreign origin", "/api/v1/sessions/kick", "application/json", "http://evil.example", kick, http.StatusForbidden},
		{"resolve from a foreign origin", "/api/v1/keys/resolve", "application/json", "https://evil.example:9775", resolve, http.StatusForbidden},
		{"resolve from a rebound name", "/api/v1/keys/resolve", "application/json", strings.Replace(self, "127.0.0.1", "rebound.example", 1), resolve, http.StatusForbidden},
		{"resolve from another local port", "/api/v1/keys/resolve", "application/json", "http://127.0.0.1:1", resolve, http.StatusForbidden},
		{"resolve from an opaque origin", "/api/v1/keys/resolve", "application/json", "null", resolve, http.StatusForbidden},
	} {
		code, body := post(t, self+tc.path, tc.ctype, tc.origin, tc.body)
		if code != tc.want {
			t.Errorf("%s: HTTP %d %s, want %d", tc.name, code, body, tc.want)
		}
	}
	s.wantUnchanged(t, "browser-shaped kicks and resolves")

	// The listener's own origin is no foreign origin.
	if code, body := post(t, self+"/api/v1/keys/resolve", "application/json; charset=utf-8", self, resolve); code != http.StatusOK {
		t.Fatalf("resolve from the listener's own origin: HTTP %d %s, want 200", code, body)
	}
	// The CLI's client sends JSON: kick works.
	cl := &admin.Client{BaseURL: self}
	if err := cl.Kick(t.Context(), id); err != nil {
		t.Fatalf("Client.Kick: %v", err)
	}
	<-s.esme.Done()
}

// Without a token, a listener that is not loopback refuses every mutating
// call and says why; reads still work, and with a token mutations do.
func TestMutatingCallsWithoutATokenAreRefusedOffLoopback(t *testing.T) {
	// The handler is told it listens on every interface; the test still
	// talks to 127.0.0.1 only.
	s := startStackWith(t, func(c *admin.Config) { c.Address = "0.0.0.0:9775" })
	s.submit(t, "lost-1")
	id := s.app.Sessions.List()[0].ID
	cl := &admin.Client{BaseURL: s.admin.URL}
	var ae *admin.APIError
	err := cl.Kick(t.Context(), id)
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || !strings.Contains(ae.Message, "token") || !strings.Contains(ae.Message, "loopback") {
		t.Fatalf("Kick without a token off loopback = %v, want HTTP 403 naming the token and loopback", err)
	}
	if _, err := cl.Resolve(t.Context(), admin.ResolveRequest{Account: "shop", Key: "lost-1", NotSent: true}); !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden {
		t.Fatalf("Resolve without a token off loopback = %v, want HTTP 403", err)
	}
	if _, err := cl.Sessions(t.Context()); err != nil {
		t.Fatalf("Sessions without a token off loopback: %v", err)
	}
	if rec, err := s.app.Store().Get(t.Context(), state.Key{Account: "shop", Key: "k:lost-1"}); err != nil || rec.State != state.Unknown {
		t.Fatalf("record after a refused resolve: %v, %v; want unknown", rec, err)
	}

	const token = "t0ken"
	st := startStackWith(t, func(c *admin.Config) { c.Address, c.Token = "0.0.0.0:9775", token })
	if err := (&admin.Client{BaseURL: st.admin.URL, Token: token}).Kick(t.Context(), st.app.Sessions.List()[0].ID); err != nil {
		t.Fatalf("Kick with the token off loopback: %v", err)
	}
}

// NewServer bounds how long a client may take to send a request and to
// read the answer, and how long an idle connection stays: a client that
// sends half a header is cut off. It warns at start when mutations are
// refused because no token is set off loopback.
func TestAdminServerCutsOffAStalledClientAndWarnsWhenMutationsAreRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.Buffer
	srv := admin.NewServer(ln, admin.Config{Address: "0.0.0.0:9775", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve = %v", err)
		}
	})
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Fatalf("timeouts: read header %v, read %v, write %v, idle %v; want all set", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "token") {
		t.Errorf("start-up log %q, want a warning that mutations need a token off loopback", l)
	}

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /api/v1/sessions/kick HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
		t.Fatal(err)
	}
	// The server answers (408) or hangs up once ReadHeaderTimeout passes;
	// the deadline only keeps a broken server from hanging the test.
	_ = c.SetReadDeadline(time.Now().Add(ReadHeaderTimeoutBound))
	_, err = io.Copy(io.Discard, bufio.NewReader(c))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a stalled request header kept the connection open past %v", ReadHeaderTimeoutBound)
	}
}

// ReadHeaderTimeoutBound is far beyond admin.ReadHeaderTimeout.
const ReadHeaderTimeoutBound = 60 * time.Second
