package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// SMPP v3.4 C-Octet String limits, in octets without the terminating NUL.
const (
	maxSystemID   = 15
	maxPassword   = 8
	maxSystemType = 12
	maxAddress    = 20 // destination_addr

	minPDUSize = 256
	maxPDUSize = 16 << 20

	vendorTLVFirst, vendorTLVLast = 0x1400, 0x3FFF
)

// checker collects the problems of one configuration; src may be nil.
type checker struct {
	src   *source
	errs  []Error
	warns []Error
}

func (k *checker) at(path, format string, args ...any) Error {
	return Error{File: k.src.fileName(), Line: k.src.line(path), Path: path, Msg: fmt.Sprintf(format, args...)}
}

func (k *checker) errorf(path, format string, args ...any) {
	k.errs = append(k.errs, k.at(path, format, args...))
}

func (k *checker) warnf(path, format string, args ...any) {
	k.warns = append(k.warns, k.at(path, format, args...))
}

// check validates c and returns its errors.
func (c *Config) check() []Error {
	k := &checker{src: c.src}
	k.config(c)
	return k.errs
}

// checkFiles reads the files the configuration names: the TLS listener's
// certificate and key, each upstream's tls_ca (a PEM certificate), the
// admin token file and the DSN file (not empty). (Parse does not read files: a configuration is
// checked apart from the machine it runs on too.)
func (c *Config) checkFiles(secrets bool) []Error {
	k := &checker{src: c.src}
	if t := c.Listen.TLS; t != nil && t.Cert != "" && t.Key != "" {
		if _, err := tls.LoadX509KeyPair(t.Cert, t.Key); err != nil {
			k.errorf("listen.tls.cert", "cannot load the certificate and key: %v", err)
		}
	}
	// The files of secrets: there, and not empty (their contents are
	// never printed).
	for path, file := range map[string]string{"admin.token_file": c.Admin.TokenFile, "store.dsn_file": c.Store.DSNFile} {
		if !secrets || file == "" || path == "store.dsn_file" && c.Store.Backend != BackendPostgres {
			continue
		}
		if b, err := os.ReadFile(file); err != nil {
			k.errorf(path, "%v", err)
		} else if len(strings.TrimSpace(string(b))) == 0 {
			k.errorf(path, "%s is empty", file)
		}
	}
	for i, u := range c.Upstreams {
		if !u.TLS || u.TLSCA == "" {
			continue
		}
		p := fmt.Sprintf("upstreams[%d].tls_ca", i)
		pem, err := os.ReadFile(u.TLSCA)
		switch {
		case err != nil:
			k.errorf(p, "%v", err)
		case !x509.NewCertPool().AppendCertsFromPEM(pem):
			k.errorf(p, "%s: no PEM certificate in it", u.TLSCA)
		}
	}
	return k.errs
}

// Warnings returns what is allowed but deserves the operator's attention,
// such as a plain-text account password, one message per entry in the form
// of an error ("config: FILE:LINE: PATH: MSG"). They never contain a
// password. cmd logs them at start-up.
func (c *Config) Warnings() []string {
	k := &checker{src: c.src}
	k.config(c)
	out := make([]string, len(k.warns))
	for i := range k.warns {
		out[i] = k.warns[i].Error()
	}
	return out
}

func (k *checker) config(c *Config) {
	k.listen(&c.Listen)
	k.hostPort("admin.address", c.Admin.Address, false)
	if host, _, err := net.SplitHostPort(c.Admin.Address); err == nil && c.Admin.TokenFile == "" && !isLoopback(host) {
		k.warnf("admin.address", "the admin API listens beyond loopback without admin.token_file")
		if c.Admin.Pprof {
			k.errorf("admin.pprof", "needs admin.token_file when admin.address is not loopback: the profiler shows the process's memory and code")
		}
	}
	k.distinct(c)

	k.store(&c.Store)
	k.positive("store.retention", c.Store.Retention)
	if c.Store.NumMemtables < 0 {
		k.errorf("store.num_memtables", "must not be negative (0 = the default)")
	}
	if t := c.Store.TableSize; t != 0 && (t < MinTableSize || t > MaxTableSize) {
		k.errorf("store.table_size", "must be between %s and %s, or 0 for the default (got %s)", MinTableSize, MaxTableSize, t)
	}

	oneOf(k, "log.format", c.Log.Format, LogText, LogJSON)
	oneOf(k, "log.level", c.Log.Level, "debug", "info", "warn", "error")
	if !c.Log.RedactAddresses {
		k.warnf("log.redact_addresses", "phone numbers will appear in logs")
	}
	k.nonNegative("shutdown_timeout", c.ShutdownTimeout)
	if c.MemoryLimit != 0 && c.MemoryLimit < MinMemoryLimit {
		k.errorf("memory_limit", "must be at least %s, or 0 for no limit (got %s)", MinMemoryLimit, c.MemoryLimit)
	}
	if c.GCPercent != 0 && (c.GCPercent < MinGCPercent || c.GCPercent > MaxGCPercent) {
		k.errorf("gc_percent", "must be between %d and %d, or 0 for Go's default of 100 (got %d)", MinGCPercent, MaxGCPercent, c.GCPercent)
	}
	if c.MaxProcs < 0 || c.MaxProcs > MaxMaxProcs {
		k.errorf("max_procs", "must be between 1 and %d, or 0 for the automatic choice (got %d)", MaxMaxProcs, c.MaxProcs)
	}
	k.smppString("proxy_system_id", c.ProxySystemID, maxSystemID, true)

	upstreams := map[string]int{}
	if len(c.Upstreams) == 0 {
		k.errorf("upstreams", "at least one upstream is required")
	}
	for i := range c.Upstreams {
		k.upstream(c, i, upstreams)
	}

	accounts := map[string]int{}
	used := map[string]bool{}
	if len(c.Accounts) == 0 {
		k.errorf("accounts", "at least one account is required")
	}
	for i := range c.Accounts {
		k.account(c, i, accounts, used)
	}
	for i := range c.Upstreams {
		if name := c.Upstreams[i].Name; name != "" && !used[name] {
			k.warnf(fmt.Sprintf("upstreams[%d].name", i), "upstream %q is in no account's route", name)
		}
	}

	prefixes := map[string]int{}
	for i, r := range c.MORoutes {
		p := fmt.Sprintf("mo_routes[%d]", i)
		if r.Prefix == "" {
			k.errorf(p+".prefix", "is required")
		} else {
			k.smppString(p+".prefix", r.Prefix, maxAddress, false)
			if j, dup := prefixes[r.Prefix]; dup {
				k.errorf(p+".prefix", "prefix %q is already routed by mo_routes[%d]", r.Prefix, j)
			} else {
				prefixes[r.Prefix] = i
			}
		}
		k.accountRef(c, p+".account", r.Account, true)
	}
	k.accountRef(c, "default_account", c.DefaultAccount, false)
}

func (k *checker) listen(l *Listen) {
	k.hostPort("listen.address", l.Address, false)
	if t := l.TLS; t != nil {
		k.hostPort("listen.tls.address", t.Address, false)
		if t.Cert == "" {
			k.errorf("listen.tls.cert", "is required (a PEM certificate file)")
		}
		if t.Key == "" {
			k.errorf("listen.tls.key", "is required (a PEM private key file)")
		}
	}
	k.positive("listen.bind_timeout", l.BindTimeout)
	k.positive("listen.enquire_link", l.EnquireLink)
	if l.MaxPDUSize < minPDUSize || l.MaxPDUSize > maxPDUSize {
		k.errorf("listen.max_pdu_size", "must be from %d to %d (got %d)", minPDUSize, maxPDUSize, l.MaxPDUSize)
	}
	k.atLeast("listen.max_connections", l.MaxConnections, 1)
	k.atLeast("listen.max_connections_per_ip", l.MaxConnectionsPerIP, 1)
	if l.MaxConnectionsPerIP > l.MaxConnections && l.MaxConnections >= 1 {
		k.errorf("listen.max_connections_per_ip", "must not exceed listen.max_connections (%d > %d)", l.MaxConnectionsPerIP, l.MaxConnections)
	}
}

// distinct rejects two listeners on the same fixed address.
func (k *checker) distinct(c *Config) {
	seen := map[string]string{}
	add := func(path, addr string) {
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
			return
		}
		if first, dup := seen[addr]; dup {
			if !k.src.written(path) && k.src.written(first) {
				path, first = first, path // report the one the file wrote
			}
			k.errorf(path, "same address as %s (%q)", first, addr)
			return
		}
		seen[addr] = path
	}
	add("listen.address", c.Listen.Address)
	if c.Listen.TLS != nil {
		add("listen.tls.address", c.Listen.TLS.Address)
	}
	add("admin.address", c.Admin.Address)
}

func (k *checker) upstream(c *Config, i int, names map[string]int) {
	u := &c.Upstreams[i]
	p := fmt.Sprintf("upstreams[%d]", i)
	switch {
	case u.Name == "":
		k.errorf(p+".name", "is required")
	case !validName(u.Name):
		k.errorf(p+".name", "must be letters, digits, '-', '_' or '.' (got %q)", u.Name)
	}
	if j, dup := names[u.Name]; dup && u.Name != "" {
		k.errorf(p+".name", "duplicate upstream name %q (also upstreams[%d])", u.Name, j)
	} else {
		names[u.Name] = i
	}
	k.hostPort(p+".address", u.Address, true)
	if !u.TLS && u.TLSCA != "" {
		k.errorf(p+".tls_ca", "needs tls: true")
	}
	if !u.TLS && u.TLSServerName != "" {
		k.errorf(p+".tls_server_name", "needs tls: true")
	}
	k.smppString(p+".system_id", u.SystemID, maxSystemID, true)
	k.smppString(p+".password", u.Password, maxPassword, false)
	k.smppString(p+".system_type", u.SystemType, maxSystemType, false)
	oneOf(k, p+".bind", u.Bind, BindTransceiver, BindTransmitter, BindTransmitterReceiver)
	k.atLeast(p+".binds", u.Binds, 1)
	k.atLeast(p+".window", u.Window, 1)
	k.atLeast(p+".throughput", u.Throughput, 0)
	k.atLeast(p+".weight", u.Weight, 0)
	k.positive(p+".response_timeout", u.ResponseTimeout)
	k.nonNegative(p+".route_wait", u.RouteWait)
	k.positive(p+".enquire_link", u.EnquireLink)
	oneOf(k, p+".resp_id_format", u.RespIDFormat, IDAsIs, IDHex, IDDec)
	oneOf(k, p+".receipt_id_format", u.ReceiptIDFormat, IDAsIs, IDHex, IDDec)
	k.atLeast(p+".deliver_window", u.DeliverWindow, 1)
	k.atLeast(p+".retry.attempts", u.Retry.Attempts, 1)
	k.nonNegative(p+".retry.budget", u.Retry.Budget)
}

// routeCapacity warns when an account's throughput is more than every
// upstream of its route together accepts (all of them capped): the excess
// waits route_wait and then gets ESME_RTHROTTLED.
func (k *checker) routeCapacity(c *Config, p string, a *Account) {
	total := 0
	for _, name := range a.Route {
		u := c.Upstream(name)
		if u.Throughput <= 0 {
			return // one upstream is unlimited
		}
		total += u.Throughput
	}
	if a.Throughput > total {
		k.warnf(p+".throughput", "%d submits/s is more than the upstreams of its route accept together (%d/s); the excess waits route_wait, then gets ESME_RTHROTTLED", a.Throughput, total)
	}
}

func (k *checker) account(c *Config, i int, ids map[string]int, used map[string]bool) {
	a := &c.Accounts[i]
	p := fmt.Sprintf("accounts[%d]", i)
	k.smppString(p+".system_id", a.SystemID, maxSystemID, true)
	if j, dup := ids[a.SystemID]; dup && a.SystemID != "" {
		k.errorf(p+".system_id", "duplicate system_id %q (also accounts[%d])", a.SystemID, j)
	} else {
		ids[a.SystemID] = i
	}

	switch {
	case a.Password != "" && a.PasswordHash != "":
		k.errorf(p+".password_hash", "set only one of password and password_hash")
	case a.Password == "" && a.PasswordHash == "":
		k.errorf(p, "needs password_hash (bcrypt) or password")
	case a.Password != "":
		k.warnf(p+".password", "plain-text password for account %q; prefer password_hash (bcrypt)", a.SystemID)
	}
	k.smppString(p+".password", a.Password, maxPassword, false)
	if a.PasswordHash != "" {
		k.bcryptHash(p+".password_hash", a.PasswordHash)
	}

	for j, s := range a.AllowedNetworks {
		if _, err := parsePrefix(s); err != nil {
			k.errorf(fmt.Sprintf("%s.allowed_networks[%d]", p, j), `must be a CIDR ("10.0.0.0/8") or an IP address (got %q)`, s)
		}
	}
	k.atLeast(p+".max_binds", a.MaxBinds, 1)
	k.atLeast(p+".throughput", a.Throughput, 0)
	k.atLeast(p+".window", a.Window, 1)

	if len(a.Route) == 0 {
		k.errorf(p+".route", "must name at least one upstream")
	}
	listed := map[string]bool{}
	weighted, known := false, true
	for j, name := range a.Route {
		rp := fmt.Sprintf("%s.route[%d]", p, j)
		u := c.Upstream(name)
		switch {
		case name == "":
			k.errorf(rp, "must name an upstream")
		case listed[name]:
			k.errorf(rp, "upstream %q is listed twice", name)
		case u == nil:
			k.errorf(rp, "no upstream is named %q", name)
		}
		listed[name] = true
		used[name] = true
		if u == nil {
			known = false
		} else if u.Weight > 0 {
			weighted = true
		}
	}
	if len(a.Route) > 0 && known && !weighted {
		k.warnf(p+".route", "every upstream of the route has weight 0 (backup only); all of them carry traffic")
	}
	if known {
		k.routeCapacity(c, p, a)
	}

	oneOf(k, p+".message_id", a.MessageID, MessageIDPassthrough, MessageIDProxy)
	if a.ProxyID.Format != "" {
		oneOf(k, p+".proxy_id.format", a.ProxyID.Format, IDHex, IDDec)
	}
	if n := a.ProxyID.Length; n != 0 && (n < 8 || n > 64) {
		k.errorf(p+".proxy_id.length", "must be 8..64 octets (got %d)", n)
	}
	k.positive(p+".dlr_retention", a.DLRRetention)
	k.positive(p+".dlr_redelivery", a.DLRRedelivery)
	k.atLeast(p+".dlr_window", a.DLRWindow, 1)
	k.idempotency(p+".idempotency", &a.Idempotency)
}

func (k *checker) idempotency(p string, id *Idempotency) {
	oneOf(k, p+".key", id.Key, KeyTLV, KeyFingerprint, KeyReference, KeyNone)
	if id.TLVTag == 0 {
		k.errorf(p+".tlv_tag", "must not be 0")
	} else if id.Key == KeyTLV && (id.TLVTag < vendorTLVFirst || id.TLVTag > vendorTLVLast) {
		k.warnf(p+".tlv_tag", "%v is outside the vendor-specific TLV range 0x1400-0x3FFF", id.TLVTag)
	}
	oneOf(k, p+".missing_key", id.MissingKey, MissingForward, MissingReject, MissingFingerprint)
	k.positive(p+".retention", id.Retention)
	if id.Key == KeyFingerprint || id.Key == KeyReference || id.MissingKey == MissingFingerprint && id.Key != KeyNone {
		k.positive(p+".fingerprint_window", id.FingerprintWindow)
	} else {
		k.nonNegative(p+".fingerprint_window", id.FingerprintWindow)
	}
	k.nonNegative(p+".inflight_wait", id.InflightWait)
	if id.ConflictStatus == 0 {
		k.errorf(p+".conflict_status", "must not be 0 (ESME_ROK)")
	}
	if id.UnknownStatus == 0 {
		k.errorf(p+".unknown_status", "must not be 0 (ESME_ROK)")
	}
	oneOf(k, p+".on_unknown", id.OnUnknown, UnknownHold, UnknownResendAfter, UnknownResend)
	k.nonNegative(p+".unknown_timeout", id.UnknownTimeout)
	switch id.OnUnknown {
	case UnknownResendAfter:
		if id.UnknownTimeout <= 0 {
			k.errorf(p+".unknown_timeout", "must be greater than 0 when on_unknown is resend_after")
		}
		k.warnf(p+".on_unknown", "resend_after may send a message twice (at-least-once)")
	case UnknownResend:
		k.warnf(p+".on_unknown", "resend relies on the upstream deduplicating by the forwarded key")
	}
}

func (k *checker) accountRef(c *Config, path, id string, required bool) {
	switch {
	case id == "":
		if required {
			k.errorf(path, "is required")
		}
	case c.Account(id) == nil:
		k.errorf(path, "no account has system_id %q", id)
	}
}

// hostPort checks a "host:port" address. A listener may leave the host out
// and use port 0 (any free port); an upstream needs both.
func (k *checker) hostPort(path, addr string, upstream bool) {
	if addr == "" {
		k.errorf(path, "is required")
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		k.errorf(path, `must be host:port such as "127.0.0.1:2775" (got %q)`, addr)
		return
	}
	n, err := strconv.ParseUint(port, 10, 16)
	low := uint64(0)
	if upstream {
		low = 1
	}
	if err != nil || n < low {
		k.errorf(path, "port must be a number from %d to 65535 (got %q)", low, port)
	}
	if upstream && host == "" {
		k.errorf(path, "must name a host (got %q)", addr)
	}
}

// smppString checks a value sent as a C-Octet String.
func (k *checker) smppString(path, s string, max int, required bool) {
	switch {
	case s == "":
		if required {
			k.errorf(path, "is required")
		}
	case isSecret(path) && len(s) > max:
		k.errorf(path, "must be at most %d octets (SMPP v3.4)", max)
	case len(s) > max:
		k.errorf(path, "must be at most %d octets (SMPP v3.4); %q has %d", max, s, len(s))
	case strings.IndexByte(s, 0) >= 0:
		k.errorf(path, "must not contain a NUL byte")
	}
}

func (k *checker) bcryptHash(path, h string) {
	if !strings.HasPrefix(h, "$2a$") && !strings.HasPrefix(h, "$2b$") && !strings.HasPrefix(h, "$2y$") {
		k.errorf(path, "must be a bcrypt hash starting with $2a$, $2b$ or $2y$")
		return
	}
	if _, err := bcrypt.Cost([]byte(h)); err != nil {
		k.errorf(path, "is not a valid bcrypt hash: %s", strings.TrimPrefix(err.Error(), "crypto/bcrypt: "))
		return
	}
	// $2a$NN$ then 53 characters of bcrypt's base64 (salt and digest):
	// bcrypt.Cost reads only the prefix, and a hash that passes it but not
	// this can never match (the account could never bind).
	if len(h) != 60 || strings.Trim(h[7:], bcryptAlphabet) != "" {
		k.errorf(path, "is not a valid bcrypt hash: want $2a$NN$ followed by 53 characters of ./A-Za-z0-9 (60 in all)")
	}
}

const bcryptAlphabet = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func (k *checker) atLeast(path string, v, low int) {
	if v < low {
		k.errorf(path, "must be at least %d (got %d)", low, v)
	}
}

func (k *checker) positive(path string, d Duration) {
	if d <= 0 {
		k.errorf(path, "must be greater than 0 (got %v)", d)
	}
}

func (k *checker) nonNegative(path string, d Duration) {
	if d < 0 {
		k.errorf(path, "must not be negative (got %v)", d)
	}
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (k *checker) store(s *Store) {
	oneOf(k, "store.backend", s.Backend, BackendBadger, BackendPostgres)
	if s.RecentAnswers < 0 || s.RecentAnswers > MaxRecentAnswers {
		k.errorf("store.recent_answers", "must be between 0 (the default, %d) and %d (got %d)", DefaultRecentAnswers, MaxRecentAnswers, s.RecentAnswers)
	}
	switch s.Backend {
	case BackendBadger:
		if s.Path == "" {
			k.errorf("store.path", "is required")
		}
		for path, v := range map[string]string{"store.dsn": s.DSN, "store.dsn_file": s.DSNFile} {
			if v != "" {
				k.errorf(path, "is for backend: postgres (the backend is badger)")
			}
		}
		if s.CommitDelay < 0 || s.CommitDelay > MaxCommitDelay {
			k.errorf("store.commit_delay", "must be between 0 and %s (got %s)", MaxCommitDelay, s.CommitDelay)
		}
	case BackendPostgres:
		switch {
		case s.DSN == "" && s.DSNFile == "":
			k.errorf("store.dsn", "is required with backend: postgres (or store.dsn_file)")
		case s.DSN != "" && s.DSNFile != "":
			k.errorf("store.dsn_file", "set store.dsn or store.dsn_file, not both")
		}
		if s.Lease < Duration(MinLease) {
			k.errorf("store.lease", "must be at least %s: it is renewed every third of it, and checked every twelfth (got %s)", MinLease, s.Lease)
		}
		if s.MaxConns < MinMaxConns {
			k.errorf("store.max_conns", "must be at least %d: two batches of writes in flight, each up to two transactions, four groups of reads, the LISTEN connection and one more (got %d)", MinMaxConns, s.MaxConns)
		}
		oneOf(k, "store.migrate", s.Migrate, MigrateAuto, MigrateOff)
		if s.CommitDelay != 0 {
			k.errorf("store.commit_delay", "is for backend: badger (the postgres store batches its writes by what is in flight)")
		}
		if !schemaName.MatchString(s.Schema) {
			k.errorf("store.schema", "must be lower-case letters, digits and _, not starting with a digit (got %q)", s.Schema)
		}
	}
}

func oneOf[T ~string](k *checker, path string, v T, allowed ...T) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	k.errorf(path, "must be one of %s (got %q)", strings.Join(names, ", "), string(v))
}

func validName(s string) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
