package main

import (
	"bufio"
	"bytes"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/session"
)

// sessions list orders ids by their numbers: esme-9 before esme-10.
func TestSessionsListSortsIDsNumerically(t *testing.T) {
	ids := []string{"esme-10", "esme-9", "esme-1", "esme-100", "esme-2"}
	slices.SortFunc(ids, naturalCompare)
	if want := []string{"esme-1", "esme-2", "esme-9", "esme-10", "esme-100"}; !slices.Equal(ids, want) {
		t.Errorf("sorted %v, want %v", ids, want)
	}
	var list []session.Info
	for _, id := range []string{"esme-10", "esme-9"} {
		list = append(list, session.Info{ID: id, Side: session.SideESME})
	}
	var out bytes.Buffer
	printSessions(&out, list, time.Now())
	if s := out.String(); strings.Index(s, "esme-9 ") > strings.Index(s, "esme-10") {
		t.Errorf("esme-10 listed before esme-9:\n%s", s)
	}
}

// keys list shortens fingerprint and untracked keys (and says so), never a
// client's key; --json and --wide keep them whole.
func TestKeysListShortensLongGeneratedKeys(t *testing.T) {
	long := "fp~3f9a01c2/ref12@kx8f2abcdefgh"
	l := admin.RecordList{Records: []admin.Record{
		{Account: "shop", Key: long, Kind: "fingerprint", State: "accepted"},
		{Account: "shop", Key: "a-client-key-that-is-quite-long-indeed", Kind: "tlv", State: "accepted"},
	}}
	shortenKeys(&l)
	if k := l.Records[0].Key; len([]rune(k)) != shortKey || !strings.HasSuffix(k, "…") || !strings.HasPrefix(long, strings.TrimSuffix(k, "…")) {
		t.Errorf("shortened fingerprint key %q", k)
	}
	if l.Records[1].Key != "a-client-key-that-is-quite-long-indeed" {
		t.Errorf("a client's key was shortened: %q", l.Records[1].Key)
	}
	var out bytes.Buffer
	printRecords(&out, l)
	if !strings.Contains(out.String(), "--wide shows them whole") {
		t.Errorf("the listing does not say keys were shortened:\n%s", out.String())
	}
}

func TestConfigCheckHelpDescribesConfig(t *testing.T) {
	out := mustCLI(t, "config", "check", "--help")
	if !regexp.MustCompile(`--config FILE, -c FILE +the configuration FILE \(YAML\) to check`).MatchString(out) {
		t.Errorf("config check --help:\n%s", out)
	}
}

// The sample configuration's upstreams use no port of the simulator's
// defaults but its SMPP port (the primary is meant to be a default sim),
// and no two share an address.
func TestSampleConfigPortsClashWithNothing(t *testing.T) {
	cfg, err := config.Load("../../testdata/config/sample.yaml")
	if err != nil {
		t.Fatal(err)
	}
	simDefaults := map[string]string{}
	for _, f := range simCommand().Flags {
		if sf, ok := f.(*cli.StringFlag); ok && (sf.Name == "listen" || sf.Name == "stats") {
			simDefaults[sf.Name] = sf.Value
		}
	}
	if simDefaults["stats"] == "" || simDefaults["listen"] == "" {
		t.Fatalf("sim defaults not found: %v", simDefaults)
	}
	seen := map[string]string{cfg.Listen.Address: "listen", cfg.Admin.Address: "admin", simDefaults["stats"]: "the simulator's stats"}
	for _, u := range cfg.Upstreams {
		if other, ok := seen[u.Address]; ok {
			t.Errorf("upstream %s at %s clashes with %s", u.Name, u.Address, other)
		}
		seen[u.Address] = "upstream " + u.Name
	}
}

// sim prints where it serves SMPP and its stats, and the stats answer
// there.
func TestSimPrintsItsAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs smppproxy sim as a child")
	}
	cmd := newChild("-test.run=^$", "--", "sim", "--listen", "127.0.0.1:0", "--stats", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^SMSC simulator: SMPP on (127\.0\.0\.1:\d+), stats on (http://127\.0\.0\.1:\d+/stats)\n$`).FindStringSubmatch(line)
	if m == nil || strings.HasSuffix(m[1], ":0") {
		t.Fatalf("sim printed %q", line)
	}
	resp, err := http.Get(m[2])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET %s = %d", m[2], resp.StatusCode)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
}
