package main

import (
	"github.com/smppproxy/smppproxy/internal/testkit"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/smpp"
)

// sharedOps is a `serve` child on the shared PostgreSQL store, as instance
// id (writeSharedConfig), with its admin API.
// It starts again on other ports when one was taken (see startOps).
func sharedOps(t *testing.T, dsn, schema, id, smsc string) *opsProxy {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p := &opsProxy{listen: freePort(t)}
		path := writeSharedConfig(t, dsn, schema, id, p.listen, smsc)
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		p.dir, p.adminURL = filepath.Dir(path), "http://"+cfg.Admin.Address
		p.logPath = filepath.Join(p.dir, "proxy.log")
		notify, env := childNotify(t)
		p.proxyProcess = startServeEnv(t, path, p.logPath, env)
		if waitReady(t, p.adminURL, p.logPath, notify) {
			return p
		}
		if attempt == 3 {
			log, _ := os.ReadFile(p.logPath)
			t.Fatalf("instance %s found its ports taken three times; the last log:\n%s", id, log)
		}
		_ = p.cmd.Process.Kill()
		_, _ = p.cmd.Process.Wait()
	}
}

// With two instances on one store, the admin CLI says which instance owns
// a record (asked on either instance), `sessions list` names the instance
// its sessions are bound to, and smppproxy_build_info carries the
// instance id; none of it shows the database's address.
func TestCLIShowsTheOwnerInstanceAndTheSessionsInstance(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "cli_test_")
	smsc := subprocessSMSC(t, sim.Config{})
	a := sharedOps(t, dsn, schema, "inst-a", smsc.Addr())
	b := sharedOps(t, dsn, schema, "inst-b", smsc.Addr())
	tx := dialAs(t, a.listen, "secret", smpp.BindTransmitter)
	if r := submit(t, tx, "own-1", "hello"); r.Status != 0 {
		t.Fatalf("submit on A: %v", r.Status)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	secret := []string{dsn, u.Host}
	noDSN := func(what, out string) {
		t.Helper()
		for _, s := range secret {
			if strings.Contains(out, s) {
				t.Errorf("%s shows the database address %q:\n%s", what, s, out)
			}
		}
	}

	for _, on := range []*opsProxy{a, b} {
		out := mustCLI(t, "keys", "show", "--admin", on.adminURL, "shop", "own-1")
		if !regexp.MustCompile(`(?m)^owner instance +inst-a$`).MatchString(out) {
			t.Errorf("keys show on %s does not name the owner instance inst-a:\n%s", on.adminURL, out)
		}
		noDSN("keys show", out)
		js := mustCLI(t, "keys", "show", "--json", "--admin", on.adminURL, "shop", "own-1")
		if !regexp.MustCompile(`"owner_instance": *"inst-a"`).MatchString(js) {
			t.Errorf("keys show --json lacks \"owner_instance\": \"inst-a\":\n%s", js)
		}
	}
	for id, on := range map[string]*opsProxy{"inst-a": a, "inst-b": b} {
		out := mustCLI(t, "sessions", "list", "--admin", on.adminURL)
		if !strings.HasPrefix(out, "INSTANCE "+id+" ") {
			t.Errorf("sessions list of %s does not start with INSTANCE %s:\n%s", on.adminURL, id, out)
		}
		noDSN("sessions list", out)
		metrics := scrape(t, on.adminURL, "")
		if !strings.Contains(metrics, `instance_id="`+id+`"`) || !strings.Contains(metrics, "smppproxy_build_info{") {
			t.Errorf("/metrics of %s: smppproxy_build_info has no instance_id=%q", on.adminURL, id)
		}
		noDSN("/metrics", metrics)
		status := testkit.GetOK(t, on.adminURL+"/api/v1/status")
		if !regexp.MustCompile(`"instance_id": *"` + id + `"`).MatchString(status) {
			t.Errorf("/api/v1/status of %s lacks instance_id %q:\n%s", on.adminURL, id, status)
		}
		noDSN("/api/v1/status", status)
	}
}
