package config

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

const samplePath = "../testdata/config/sample.yaml"

// base is the smallest valid configuration; tests append to it or replace
// parts of it.
const base = `upstreams:
  - name: primary
    address: "127.0.0.1:2776"
    system_id: proxy
accounts:
  - system_id: shop
    password: secret1
    route: [primary]
`

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse([]byte(src), "t.yaml")
	if err != nil {
		t.Fatalf("Parse:\n%s\nerror: %v", src, err)
	}
	return c
}

// parseErrors returns the problems Parse reports for src, failing the test
// if it reports none.
func parseErrors(t *testing.T, src string) []Error {
	t.Helper()
	_, err := Parse([]byte(src), "t.yaml")
	if err == nil {
		t.Fatalf("Parse:\n%s\nsucceeded, want an error", src)
	}
	var errs *Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Parse error is %T, want *Errors: %v", err, err)
	}
	return errs.List
}

func TestSample(t *testing.T) {
	c, err := Load(samplePath)
	if err != nil {
		t.Fatalf("Load(%s): %v", samplePath, err)
	}
	shop, legacy := c.Account("shop"), c.Account("legacy")
	primary, backup := c.Upstream("primary"), c.Upstream("backup")
	if shop == nil || legacy == nil || primary == nil || backup == nil {
		t.Fatalf("Account/Upstream lookups: shop=%v legacy=%v primary=%v backup=%v", shop, legacy, primary, backup)
	}
	tests := map[string]struct{ got, want any }{
		"listen.address":                 {c.Listen.Address, "127.0.0.1:2775"},
		"listen.tls":                     {c.Listen.TLS, (*ListenTLS)(nil)},
		"listen.bind_timeout":            {c.Listen.BindTimeout.Std(), 10 * time.Second},
		"listen.max_pdu_size":            {c.Listen.MaxPDUSize, 65536},
		"store.retention":                {c.Store.Retention.Std(), 72 * time.Hour},
		"log.redact_addresses":           {c.Log.RedactAddresses, true},
		"proxy_system_id":                {c.ProxySystemID, "smppproxy"},
		"shop.password_hash prefix":      {c.Accounts[0].PasswordHash[:7], "$2a$10$"},
		"shop.allowed_networks":          {len(shop.AllowedNetworks), 3},
		"shop.throughput":                {shop.Throughput, 200},
		"shop.route":                     {strings.Join(shop.Route, ","), "primary,backup"},
		"shop.idempotency.key":           {shop.Idempotency.Key, KeyTLV},
		"shop.idempotency.tlv_tag":       {shop.Idempotency.TLVTag, Tag(0x1400)},
		"shop.idempotency.retention":     {shop.Idempotency.Retention.Std(), 24 * time.Hour},
		"shop.conflict_status 0x...400":  {shop.Idempotency.ConflictStatus, Status(1024)},
		"shop.unknown_status 0x08":       {shop.Idempotency.UnknownStatus, Status(8)},
		"legacy.password":                {legacy.Password, "legacy1"},
		"legacy.max_binds default":       {legacy.MaxBinds, 4},
		"legacy.window default":          {legacy.Window, 50},
		"legacy.throughput default":      {legacy.Throughput, 0},
		"legacy.message_id":              {legacy.MessageID, MessageIDProxy},
		"legacy.dlr_retention default":   {legacy.DLRRetention.Std(), 72 * time.Hour},
		"legacy.dlr_redelivery default":  {legacy.DLRRedelivery.Std(), 10 * time.Second},
		"legacy.key":                     {legacy.Idempotency.Key, KeyFingerprint},
		"legacy.fingerprint_window":      {legacy.Idempotency.FingerprintWindow.Std(), 30 * time.Second},
		"legacy.retention from store":    {legacy.Idempotency.Retention.Std(), 72 * time.Hour},
		"legacy.tlv_tag default":         {legacy.Idempotency.TLVTag, Tag(0x1400)},
		"legacy.unknown_status decimal":  {legacy.Idempotency.UnknownStatus, Status(0x58)},
		"legacy.conflict_status default": {legacy.Idempotency.ConflictStatus, Status(0x400)},
		"legacy.inflight_wait default":   {legacy.Idempotency.InflightWait.Std(), 3 * time.Second},
		"legacy.on_unknown default":      {legacy.Idempotency.OnUnknown, UnknownHold},
		"primary.weight unset":           {primary.Weight, 1},
		"backup.weight 0":                {backup.Weight, 0},
		"primary.binds":                  {primary.Binds, 2},
		"backup.binds default":           {backup.Binds, 1},
		"backup.window default":          {backup.Window, 10},
		"backup.bind":                    {backup.Bind, BindTransmitterReceiver},
		"primary.resp_id_format":         {primary.RespIDFormat, IDHex},
		"backup.receipt_id_format":       {backup.ReceiptIDFormat, IDAsIs},
		"backup.echo_tlv":                {backup.EchoTLV, Tag(0x1400)},
		"backup.response_timeout":        {backup.ResponseTimeout.Std(), 10 * time.Second},
		"backup.route_wait":              {backup.RouteWait.Std(), 2 * time.Second},
		"backup.retry.attempts":          {backup.Retry.Attempts, 3},
		"backup.retry.budget":            {backup.Retry.Budget.Std(), 5 * time.Second},
		"mo_routes[1]":                   {c.MORoutes[1], MORoute{Prefix: "4478", Account: "legacy"}},
		"default_account":                {c.DefaultAccount, "shop"},
		"unknown account":                {c.Account("nobody"), (*Account)(nil)},
		"unknown upstream":               {c.Upstream("nobody"), (*Upstream)(nil)},
	}
	for name, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", name, tt.got, tt.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	c := mustParse(t, base)
	a, u := c.Accounts[0], c.Upstreams[0]
	want := *Default()
	want.Accounts = []Account{AccountDefaults()}
	want.Accounts[0].SystemID, want.Accounts[0].Password = "shop", "secret1"
	want.Accounts[0].Route = []string{"primary"}
	want.Upstreams = []Upstream{UpstreamDefaults()}
	want.Upstreams[0].Name, want.Upstreams[0].Address, want.Upstreams[0].SystemID = "primary", "127.0.0.1:2776", "proxy"

	tests := map[string]struct{ got, want any }{
		"listen":            {c.Listen, want.Listen},
		"admin":             {c.Admin, want.Admin},
		"store":             {c.Store, want.Store},
		"log":               {c.Log, want.Log},
		"shutdown_timeout":  {c.ShutdownTimeout, want.ShutdownTimeout},
		"proxy_system_id":   {c.ProxySystemID, want.ProxySystemID},
		"account.idem":      {a.Idempotency, want.Accounts[0].Idempotency},
		"account.window":    {a.Window, 50},
		"account.max_binds": {a.MaxBinds, 4},
		"upstream.retry":    {u.Retry, want.Upstreams[0].Retry},
		"upstream.weight":   {u.Weight, 1},
		"upstream.bind":     {u.Bind, BindTransceiver},
		"upstream.enquire":  {u.EnquireLink, Duration(30 * time.Second)},
		"listen.address":    {c.Listen.Address, "0.0.0.0:2775"},
		"admin.address":     {c.Admin.Address, "127.0.0.1:9775"},
		"store.path":        {c.Store.Path, "./data"},
		"store.backend":     {c.Store.Backend, "badger"},
	}
	for name, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %+v, want %+v", name, tt.got, tt.want)
		}
	}
}

func TestBadFiles(t *testing.T) {
	tests := map[string]struct {
		line int
		path string
		msg  string
	}{
		"bad-unknown-key.yaml": {12, "accounts[0].idempotency.tvl_tag", `unknown key (did you mean "tlv_tag"?)`},
		"bad-enum.yaml":        {11, "accounts[0].idempotency.key", `must be one of tlv, fingerprint, reference, none (got "tvl")`},
		"bad-route.yaml":       {14, "accounts[1].route[1]", `no upstream is named "primray"`},
		"bad-status.yaml":      {11, "accounts[0].idempotency.conflict_status", `(got "0x4GG")`},
	}
	for file, tt := range tests {
		path := "../testdata/config/" + file
		_, err := Load(path)
		var errs *Errors
		if !errors.As(err, &errs) || len(errs.List) != 1 {
			t.Errorf("Load(%s) = %v, want exactly one error", file, err)
			continue
		}
		e := errs.List[0]
		if e.File != path || e.Line != tt.line || e.Path != tt.path || !strings.Contains(e.Msg, tt.msg) {
			t.Errorf("Load(%s) = %q, want %s:%d: %s: ...%s", file, err, path, tt.line, tt.path, tt.msg)
		}
		wantPrefix := "config: " + path + ":" + strconv.Itoa(tt.line) + ": " + tt.path + ": "
		if !strings.HasPrefix(err.Error(), wantPrefix) {
			t.Errorf("Load(%s).Error() = %q, want prefix %q", file, err, wantPrefix)
		}
	}
}

func TestManyErrorsReportedTogether(t *testing.T) {
	_, err := Load("../testdata/config/bad-many.yaml")
	var errs *Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Load(bad-many.yaml) = %v, want *Errors", err)
	}
	want := []struct {
		line int
		path string
	}{
		{3, "listen.address"},
		{4, "listen.max_pdu_size"},
		{6, "store.retention"},
		{11, "upstreams[0].weight"},
		{12, "upstreams[1].name"},
		{17, "accounts[0].password"},
		{19, "accounts[0].window"},
		{21, "accounts[0].idempotency.unknown_timeout"},
		{22, "accounts[1].system_id"},
		{23, "accounts[1].password_hash"},
		{24, "accounts[1].route"},
		{25, "mo_routes[0].account"},
		{26, "default_account"},
	}
	if len(errs.List) != len(want) {
		t.Fatalf("Load(bad-many.yaml) reported %d errors, want %d:\n%v", len(errs.List), len(want), err)
	}
	for i, w := range want {
		if e := errs.List[i]; e.Line != w.line || e.Path != w.path {
			t.Errorf("error %d = %d %s (%s), want line %d %s", i, e.Line, e.Path, e.Msg, w.line, w.path)
		}
	}
	if n := strings.Count(err.Error(), "\n"); n != len(want)-1 {
		t.Errorf("Error() has %d lines, want %d", n+1, len(want))
	}
	var one *Error
	if !errors.As(err, &one) || one.Path != "listen.address" {
		t.Errorf("errors.As(*Error) = %v, want the first problem", one)
	}
}

// TestErrors checks single problems written inline: each must be reported
// at its line and path.
func TestErrors(t *testing.T) {
	tests := map[string]struct {
		src  string
		line int
		path string
		msg  string
	}{
		"unknown top-level key":       {"bogus: 1\n" + base, 1, "bogus", "unknown key"},
		"unknown nested key":          {base + "listen:\n  adress: x:1\n", 10, "listen.adress", `did you mean "address"`},
		"unknown key in flow mapping": {base + "admin: {address: 'a:1', token: x}\n", 9, "admin.token", "unknown key"},
		"duplicate key":               {base + "log:\n  level: info\n  level: debug\n", 11, "log.level", "duplicate key (first at line 10)"},
		"mapping expected":            {base + "store: badger\n", 9, "store", "must be a mapping"},
		"list expected":               {base + "mo_routes: shop\n", 9, "mo_routes", "must be a list"},
		"float for int":               {base + "listen:\n  max_pdu_size: 1.5e6\n", 10, "listen.max_pdu_size", `must be an integer (got "1.5e6")`},
		"string for int":              {base + "listen:\n  max_pdu_size: big\n", 10, "listen.max_pdu_size", "must be an integer"},
		"bad duration":                {base + "shutdown_timeout: 10\n", 9, "shutdown_timeout", `Go duration such as "10s"`},
		"negative duration":           {base + "shutdown_timeout: -1s\n", 9, "shutdown_timeout", "must not be negative"},
		"bad bool":                    {base + "log: {redact_addresses: maybe}\n", 9, "log.redact_addresses", "true or false"},
		"tlv_tag too big":             {base + "    idempotency: {tlv_tag: 0x10000}\n", 9, "accounts[0].idempotency.tlv_tag", "at most 0xFFFF"},
		"tlv_tag zero":                {base + "    idempotency: {tlv_tag: 0}\n", 9, "accounts[0].idempotency.tlv_tag", "must not be 0"},
		"status zero":                 {base + "    idempotency:\n      unknown_status: 0x0\n", 10, "accounts[0].idempotency.unknown_status", "must not be 0"},
		"status too big":              {base + "    idempotency: {conflict_status: 0x100000000}\n", 9, "accounts[0].idempotency.conflict_status", "SMPP status"},
		"resend_after needs timeout":  {base + "    idempotency:\n      on_unknown: resend_after\n", 10, "accounts[0].idempotency.unknown_timeout", "greater than 0"},
		"missing_key enum":            {base + "    idempotency: {missing_key: drop}\n", 9, "accounts[0].idempotency.missing_key", "forward, reject, fingerprint"},
		"message_id enum":             {base + "    message_id: ours\n", 9, "accounts[0].message_id", "passthrough, proxy"},
		"both passwords":              {base + "    password_hash: '$2a$10$hXV4.6lw1nx8/rDh78zUIOw.Bk3HfsSadO6krWRe52qbqH8unadlO'\n", 9, "accounts[0].password_hash", "only one"},
		"bad network":                 {base + "    allowed_networks: [10.0.0.0/8, 10.0.0.300]\n", 9, "accounts[0].allowed_networks[1]", `(got "10.0.0.300")`},
		// From review: these passed, and the account could never bind.
		"hash salt not bcrypt base64": {strings.Replace(base, "password: secret1", "password_hash: '$2a$10$hXV4.6lw1nx8/rDh78zUIO!.Bk3HfsSadO6krWRe52qbqH8unadlO'", 1), 7, "accounts[0].password_hash", "not a valid bcrypt hash"},
		"hash too short":              {strings.Replace(base, "password: secret1", "password_hash: '$2a$10$hXV4.6lw1nx8/rDh78zUIOw.Bk3HfsSadO6krWRe52qbqH8unadl'", 1), 7, "accounts[0].password_hash", "not a valid bcrypt hash"},
		"route empty":                 {strings.Replace(base, "route: [primary]", "route: []", 1), 8, "accounts[0].route", "at least one"},
		"route twice":                 {strings.Replace(base, "route: [primary]", "route: [primary, primary]", 1), 8, "accounts[0].route[1]", "listed twice"},
		"system_id too long":          {strings.Replace(base, "system_id: shop", "system_id: sixteen-octets-id", 1), 6, "accounts[0].system_id", "at most 15 octets"},
		"upstream address":            {strings.Replace(base, `"127.0.0.1:2776"`, "smsc.example.net", 1), 3, "upstreams[0].address", "host:port"},
		"upstream bind enum":          {strings.Replace(base, "system_id: proxy", "system_id: proxy\n    bind: receiver", 1), 5, "upstreams[0].bind", "transceiver, transmitter, transmitter+receiver"},
		"upstream id format":          {strings.Replace(base, "system_id: proxy", "system_id: proxy\n    resp_id_format: HEX", 1), 5, "upstreams[0].resp_id_format", "as-is, hex, dec"},
		"upstream binds 0":            {strings.Replace(base, "system_id: proxy", "system_id: proxy\n    binds: 0", 1), 5, "upstreams[0].binds", "at least 1"},
		"upstream missing system_id":  {strings.Replace(base, "    system_id: proxy\n", "", 1), 2, "upstreams[0].system_id", "is required"},
		"account missing password":    {strings.Replace(base, "    password: secret1\n", "", 1), 6, "accounts[0]", "password_hash (bcrypt) or password"},
		"store backend":               {base + "store: {backend: mysql}\n", 9, "store.backend", `must be one of badger, postgres (got "mysql")`},
		"log level":                   {base + "log: {level: verbose}\n", 9, "log.level", "debug, info, warn, error"},
		"max_pdu_size too big":        {base + "listen: {max_pdu_size: 16777217}\n", 9, "listen.max_pdu_size", "from 256 to 16777216"},
		"tls needs cert":              {base + "listen:\n  tls:\n    key: k.pem\n", 11, "listen.tls.cert", "is required"},
		"same listen addresses":       {base + "listen: {address: '127.0.0.1:9775'}\n", 9, "listen.address", "same address as admin.address"},
		"mo route prefix":             {base + "mo_routes: [{account: shop}]\n", 9, "mo_routes[0].prefix", "is required"},
		"second document":             {base + "---\nlisten: {}\n", 10, "", "only one YAML document"},
		"syntax":                      {base + "listen:\n  address: [\n", 10, "", "invalid YAML"},
		"not a mapping":               {"- a\n- b\n", 1, "", "must be a mapping"},
		"self-referencing merge":      {base + "listen: &l\n  <<: *l\n", 10, "listen", "alias refers to a value that contains it"},
	}
	for name, tt := range tests {
		errs := parseErrors(t, tt.src)
		found := false
		for _, e := range errs {
			if e.Line == tt.line && e.Path == tt.path && strings.Contains(e.Msg, tt.msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: Parse = %v, want line %d %s: ...%s", name, &Errors{List: errs}, tt.line, tt.path, tt.msg)
		}
	}
}

func TestUpstreamWeight(t *testing.T) {
	tests := map[string]struct {
		line string
		want int
	}{
		"unset":      {"", 1},
		"explicit 0": {"    weight: 0\n", 0},
		"explicit 3": {"    weight: 3\n", 3},
		"null":       {"    weight:\n", 1},
	}
	for name, tt := range tests {
		c := mustParse(t, strings.Replace(base, "    system_id: proxy\n", "    system_id: proxy\n"+tt.line, 1))
		if got := c.Upstreams[0].Weight; got != tt.want {
			t.Errorf("%s: Weight = %d, want %d", name, got, tt.want)
		}
	}
}

func TestListenTLS(t *testing.T) {
	c := mustParse(t, base+"listen:\n  tls: {cert: server.crt, key: server.key}\n")
	want := ListenTLS{Address: "0.0.0.0:3550", Cert: "server.crt", Key: "server.key"}
	if c.Listen.TLS == nil || *c.Listen.TLS != want {
		t.Errorf("Listen.TLS = %+v, want %+v", c.Listen.TLS, want)
	}
	c = mustParse(t, base+"listen:\n  tls:\n")
	if c.Listen.TLS != nil {
		t.Errorf("Listen.TLS = %+v for an empty tls key, want nil", c.Listen.TLS)
	}
}

func TestDuration(t *testing.T) {
	tests := map[string]struct {
		want time.Duration
		ok   bool
	}{
		"10s":      {10 * time.Second, true},
		"72h":      {72 * time.Hour, true},
		"1m30s":    {90 * time.Second, true},
		"250ms":    {250 * time.Millisecond, true},
		"0s":       {0, true},
		"0":        {0, true},
		`"5s"`:     {5 * time.Second, true},
		"10":       {0, false},
		"-1s":      {0, false},
		"3 days":   {0, false},
		"[1s]":     {0, false},
		"1d":       {0, false},
		"1h0m0s":   {time.Hour, true},
		"2562048h": {0, false}, // overflows time.Duration
	}
	for in, tt := range tests {
		var d struct {
			D Duration `yaml:"d"`
		}
		err := yaml.Unmarshal([]byte("d: "+in), &d)
		if (err == nil) != tt.ok || tt.ok && d.D.Std() != tt.want {
			t.Errorf("Duration(%s) = %v, %v; want %v, ok=%v", in, d.D.Std(), err, tt.want, tt.ok)
		}
	}
}

func TestDurationString(t *testing.T) {
	tests := map[time.Duration]string{
		72 * time.Hour:             "72h",
		90 * time.Second:           "1m30s",
		time.Minute:                "1m",
		time.Hour + 30*time.Second: "1h0m30s",
		time.Hour + time.Minute:    "1h1m",
		0:                          "0s",
		1500 * time.Millisecond:    "1.5s",
		250 * time.Millisecond:     "250ms",
	}
	for d, want := range tests {
		if got := Duration(d).String(); got != want {
			t.Errorf("Duration(%v).String() = %q, want %q", d, got, want)
		}
		back, err := time.ParseDuration(Duration(d).String())
		if err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", Duration(d).String(), back, err, d)
		}
	}
}

func TestStatusAndTag(t *testing.T) {
	tests := map[string]struct {
		status Status
		sok    bool
		tag    Tag
		tok    bool
	}{
		"0x58":        {0x58, true, 0x58, true},
		"0x00000400":  {1024, true, 0x400, true},
		"0X1400":      {0x1400, true, 0x1400, true},
		`"0x08"`:      {8, true, 8, true},
		"88":          {88, true, 88, true},
		"010":         {10, true, 10, true}, // decimal, not octal
		"5120":        {5120, true, 5120, true},
		"0xFFFF":      {0xFFFF, true, 0xFFFF, true},
		"0x10000":     {0x10000, true, 0, false},
		"0xFFFFFFFF":  {0xFFFFFFFF, true, 0, false},
		"0x100000000": {0, false, 0, false},
		"-1":          {0, false, 0, false},
		"0x":          {0, false, 0, false},
		"0o17":        {0, false, 0, false},
		"1_000":       {0, false, 0, false},
		"ESME_ROK":    {0, false, 0, false},
		"1.0":         {0, false, 0, false},
		"{a: 1}":      {0, false, 0, false},
	}
	for in, tt := range tests {
		var s struct {
			S Status `yaml:"s"`
		}
		err := yaml.Unmarshal([]byte("s: "+in), &s)
		if (err == nil) != tt.sok || tt.sok && s.S != tt.status {
			t.Errorf("Status(%s) = %v, %v; want %v, ok=%v", in, s.S, err, tt.status, tt.sok)
		}
		var g struct {
			T Tag `yaml:"t"`
		}
		err = yaml.Unmarshal([]byte("t: "+in), &g)
		if (err == nil) != tt.tok || tt.tok && g.T != tt.tag {
			t.Errorf("Tag(%s) = %v, %v; want %v, ok=%v", in, g.T, err, tt.tag, tt.tok)
		}
	}
}

func TestMarshal(t *testing.T) {
	in := struct {
		D Duration `yaml:"d"`
		S Status   `yaml:"s"`
		T Tag      `yaml:"t"`
	}{Duration(72 * time.Hour), 0x400, 0x1400}
	out, err := yaml.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := "d: 72h\ns: 0x00000400\nt: 0x1400\n"; string(out) != want {
		t.Errorf("yaml.Marshal = %q, want %q", out, want)
	}
	back := in
	back.D, back.S, back.T = 0, 0, 0
	if err := yaml.Unmarshal(out, &back); err != nil || back != in {
		t.Errorf("round trip = %+v, %v; want %+v", back, err, in)
	}
}

func TestMergeKeys(t *testing.T) {
	src := `upstreams:
  - &up
    name: primary
    address: "127.0.0.1:2776"
    system_id: proxy
    window: 20
  - <<: *up
    name: backup
    weight: 0
accounts:
  - &acct
    system_id: shop
    password: secret1
    route: [primary, backup]
    idempotency: {key: none}
  - <<: *acct
    system_id: news
`
	c := mustParse(t, src)
	tests := map[string]struct{ got, want any }{
		"backup.window merged":     {c.Upstreams[1].Window, 20},
		"backup.weight overridden": {c.Upstreams[1].Weight, 0},
		"primary.weight default":   {c.Upstreams[0].Weight, 1},
		"news.key merged":          {c.Accounts[1].Idempotency.Key, KeyNone},
		"news.system_id":           {c.Accounts[1].SystemID, "news"},
		"news.window default":      {c.Accounts[1].Window, 50},
	}
	for name, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", name, tt.got, tt.want)
		}
	}
}

// TestKnownFieldsAgreement checks that the schema walk agrees with yaml.v3's
// own strict decoding: what Parse accepts, a KnownFields decoder accepts.
func TestKnownFieldsAgreement(t *testing.T) {
	for _, file := range []string{samplePath, "../testdata/config/bad-unknown-key.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, perr := Parse(data, file)
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		var c Config
		derr := dec.Decode(&c)
		if (perr == nil) != (derr == nil) {
			t.Errorf("%s: Parse error %v, yaml.v3 KnownFields error %v; want both or neither", file, perr, derr)
		}
	}
}

func TestWarnings(t *testing.T) {
	c, err := Load(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	w := c.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "sample.yaml:") || !strings.Contains(w[0], "accounts[1].password: plain-text password") {
		t.Errorf("Warnings() = %q, want one line-numbered plain-password warning", w)
	}
	for _, s := range w {
		if strings.Contains(s, "legacy1") {
			t.Errorf("warning %q contains the password", s)
		}
	}

	c = mustParse(t, strings.Replace(base, "system_id: proxy", "system_id: proxy\n    weight: 0", 1)+
		"admin: {address: '0.0.0.0:9775'}\nlog: {redact_addresses: false}\n")
	want := []string{"admin.address", "log.redact_addresses", "accounts[0].password", "accounts[0].route: every upstream"}
	got := strings.Join(c.Warnings(), "\n")
	for _, s := range want {
		if !strings.Contains(got, s) {
			t.Errorf("Warnings() = %q, want one about %s", got, s)
		}
	}
}

func TestPasswordsNeverInErrors(t *testing.T) {
	const pw, hash = "sup3r-s3cret-passw0rd", "$2a$10$zzzzzzzzzzzzzz"
	src := base + "  - system_id: x\n    password: " + pw + "\n    password_hash: '" + hash + "'\n    route: [primary]\n" +
		"  - system_id: y\n    password: [" + pw + "]\n    route: [primary]\n" +
		"  - system_id: z\n    password_hash: '" + hash + "'\n    route: [primary]\n"
	_, err := Parse([]byte(src), "t.yaml")
	if err == nil {
		t.Fatal("Parse succeeded, want errors")
	}
	if s := err.Error(); strings.Contains(s, pw) || strings.Contains(s, "zzzz") {
		t.Errorf("Parse error reveals a password or hash:\n%s", s)
	}
}

func TestValidateBuiltInGo(t *testing.T) {
	c := Default()
	if err := c.Validate(); err == nil {
		t.Error("Default().Validate() = nil, want errors (no accounts, no upstreams)")
	}
	u := UpstreamDefaults()
	u.Name, u.Address, u.SystemID = "sim", "127.0.0.1:2776", "proxy"
	a := AccountDefaults()
	a.SystemID, a.Password, a.Route = "demo", "demo", []string{"sim"}
	c.Upstreams, c.Accounts = []Upstream{u}, []Account{a}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v, want nil", err)
	}
	c.Accounts[0].Window = 0
	err := c.Validate()
	if err == nil || err.Error() != "config: accounts[0].window: must be at least 1 (got 0)" {
		t.Errorf("Validate() = %v, want the window error without file or line", err)
	}
}

func TestAllows(t *testing.T) {
	a := Account{AllowedNetworks: []string{"10.0.0.0/8", "192.168.1.7", "2001:db8::/32", "::ffff:172.16.0.0/108"}}
	tests := map[string]bool{
		"10.1.2.3":        true,
		"11.0.0.1":        false,
		"192.168.1.7":     true,
		"192.168.1.8":     false,
		"::ffff:10.0.0.1": true,
		"2001:db8::1":     true,
		"2001:db9::1":     false,
		"172.16.5.5":      true,
		"172.32.0.1":      false,
	}
	for ip, want := range tests {
		if got := a.Allows(netip.MustParseAddr(ip)); got != want {
			t.Errorf("Allows(%s) = %v, want %v", ip, got, want)
		}
	}
	if !(&Account{}).Allows(netip.MustParseAddr("8.8.8.8")) {
		t.Error("Allows with no allowed_networks = false, want true")
	}
}

func FuzzParse(f *testing.F) {
	for _, file := range []string{samplePath, "../testdata/config/bad-many.yaml", "../testdata/config/bad-unknown-key.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(base))
	f.Add([]byte("a: &a [*a]\nlisten: &l {<<: *l}\n"))
	f.Add([]byte("accounts: &x [*x, *x]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml")
		if err != nil {
			var errs *Errors
			if !errors.As(err, &errs) || len(errs.List) == 0 {
				t.Fatalf("Parse error %T %v, want a non-empty *Errors", err, err)
			}
			return
		}
		_ = c.Warnings()
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
		for i := range c.Accounts {
			if c.Accounts[i].Idempotency.Retention <= 0 {
				t.Fatalf("accounts[%d].idempotency.retention = %v after Parse", i, c.Accounts[i].Idempotency.Retention)
			}
		}
	})
}
