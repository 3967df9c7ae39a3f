package admin_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/proxytest"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// The admin API must not let anyone recover an OTP from a record: a
// listing of the record of "Your code is NNNNNN" (fingerprint key policy,
// so the key is derived from the fingerprint too) is brute-forced over the
// 10^6 codes with the unsalted SHA-256 fingerprint; no candidate's hash
// may appear, in full or as the 8-digit tag, and the record's real
// fingerprint does not appear in any admin answer.
func TestAdminOutputCannotBeBruteForcedBackToAnOTP(t *testing.T) {
	st := startStackWith(t, func(*admin.Config) {}, proxytest.WithConfig(func(cfg *config.Config) {
		cfg.Accounts[0].Idempotency.Key = config.KeyFingerprint
	}))
	app, srv, c := st.app, st.admin, st.esme
	ctx := t.Context()
	const code = 482913
	if r, err := c.Submit(ctx, otpSubmit(code)); err != nil || r.Status != 0 {
		t.Fatalf("submit = %+v, %v", r, err)
	}

	list := testkit.GetOK(t, srv.URL+"/api/v1/keys?account=shop")
	var stored *state.Record
	_ = app.Store().Scan(ctx, func(r *state.Record) bool { stored = r; return false })
	if stored == nil {
		t.Fatal("no record stored")
	}
	shown := regexp.MustCompile(`"key":\s*"([^"]+)"`).FindStringSubmatch(list)
	if shown == nil {
		t.Fatalf("listing shows no key: %s", list)
	}
	show := testkit.GetOK(t, srv.URL+"/api/v1/keys/show?account=shop&key="+url.QueryEscape(shown[1]))
	if !strings.Contains(show, `"accepted"`) {
		t.Errorf("keys/show by the key the listing shows = %s, want the record", show)
	}
	answers := list + show
	for _, full := range []string{hex.EncodeToString(stored.Fingerprint[:]), stored.Key.Key} {
		if strings.Contains(answers, full) {
			t.Errorf("admin output holds the record's fingerprint %s:\n%s", full, answers)
		}
	}
	bruteForceOTP(t, answers, code)
}

// otpSubmit is the message of one-time code n.
func otpSubmit(n int) esme.Submit {
	return esme.Submit{Src: "BANK", Dst: "447700900123", Text: fmt.Appendf(nil, "Your code is %06d", n)}
}

// bruteForceOTP hashes the message of every 6-digit code as the unsalted
// fingerprint did and fails if the answers show one of those hashes (in
// full, or the real code's as an 8-digit tag).
func bruteForceOTP(t *testing.T, answers string, code int) {
	t.Helper()
	tokens := map[string]bool{}
	for _, tok := range regexp.MustCompile(`[0-9a-f]{8,}`).FindAllString(answers, -1) {
		tokens[tok] = true
	}
	body := otpSubmit(0).Body()
	base := make([]byte, smpp.HeaderLen, smpp.HeaderLen+len(body))
	smpp.PutHeader(base, smpp.Header{Length: uint32(smpp.HeaderLen + len(body)), ID: smpp.CmdSubmitSM, Sequence: 1})
	base = append(base, body...)
	at := bytes.Index(base, []byte("000000"))
	hits := 0
	for n := range 1_000_000 {
		copy(base[at:], fmt.Appendf(nil, "%06d", n))
		sub, err := smpp.ParseSubmit(base)
		if err != nil {
			t.Fatal(err)
		}
		fp := sub.Fingerprint()
		h := hex.EncodeToString(fp[:])
		switch {
		case tokens[h] || strings.Contains(answers, h):
			t.Fatalf("the plain SHA-256 of code %06d is in the admin output:\n%s", n, answers)
		case tokens[h[:8]] && n == code:
			t.Fatalf("the tag shown is the plain SHA-256 prefix of the real code %06d:\n%s", n, answers)
		case tokens[h[:8]]:
			hits++ // by chance (about 1 in 4,000 per tag): tells a brute forcer nothing
		}
	}
	t.Logf("chance matches of an 8-digit tag among 10^6 candidates: %d", hits)
}
