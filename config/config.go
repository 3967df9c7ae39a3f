// Package config is the proxy's YAML configuration: the schema of SPEC §8,
// its defaults, and validation whose every error names the file, the line
// and the path of the offending value:
//
//	config: proxy.yaml:12: accounts[0].idempotency.key: must be one of tlv, fingerprint, reference, none (got "tvl")
//
// Unknown keys are errors. All problems of a file are reported together as
// one *Errors. The configuration is read once, by cmd, with Load or Parse and
// passed down as values; this package keeps no state of its own.
//
// Durations are Go duration strings ("10s", "72h"); SMPP statuses and TLV
// tags are hex ("0x58", "0x00000400") or decimal integers.
//
// A value that is absent from the file gets its default; a value written
// explicitly is kept, even when it is zero. That is how an upstream's
// "weight: 0" (a backup) differs from no weight at all (weight 1).
package config

import (
	"net/netip"
	"strings"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// Config is the whole configuration file.
type Config struct {
	Listen          Listen     `yaml:"listen"`
	Admin           Admin      `yaml:"admin"`
	Store           Store      `yaml:"store"`
	Log             Log        `yaml:"log"`
	ShutdownTimeout Duration   `yaml:"shutdown_timeout"` // drain time on SIGTERM; default 10s
	ProxySystemID   string     `yaml:"proxy_system_id"`  // system_id in the proxy's bind_*_resp; default "smppproxy"
	MemoryLimit     Bytes      `yaml:"memory_limit"`     // serve's soft memory limit (see DefaultMemoryLimit); 0 = none
	GCPercent       int        `yaml:"gc_percent"`       // serve's GOGC (see GCPercentOrDefault); 0 = the store's default
	MaxProcs        int        `yaml:"max_procs"`        // serve's GOMAXPROCS (see MaxProcsOrDefault); 0 = automatic
	Accounts        []Account  `yaml:"accounts"`
	Upstreams       []Upstream `yaml:"upstreams"`
	MORoutes        []MORoute  `yaml:"mo_routes"`
	DefaultAccount  string     `yaml:"default_account"` // receives MO that no mo_routes prefix matches; "" = none

	src *source // where the configuration was parsed from; nil when built in Go
}

// Listen is the ESME-facing SMPP listener.
type Listen struct {
	Address     string     `yaml:"address"`      // host:port; default "0.0.0.0:2775"
	TLS         *ListenTLS `yaml:"tls"`          // optional second, TLS listener; nil = none
	BindTimeout Duration   `yaml:"bind_timeout"` // from connect to a successful bind; default 10s
	MaxPDUSize  int        `yaml:"max_pdu_size"` // largest accepted command_length; default 65536
	EnquireLink Duration   `yaml:"enquire_link"` // idle time before the proxy sends enquire_link; default 30s
	// MaxConnections caps the open ESME connections over all listeners;
	// beyond it a connection is accepted and closed at once. Default 10000.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerIP caps the open connections from one source address;
	// default 200.
	MaxConnectionsPerIP int `yaml:"max_connections_per_ip"`
}

// ListenTLS is the optional TLS listener. Cert and Key are PEM file paths;
// they are read by cmd, not checked here.
type ListenTLS struct {
	Address string `yaml:"address"` // default "0.0.0.0:3550"
	Cert    string `yaml:"cert"`
	Key     string `yaml:"key"`
}

// Admin is the HTTP admin endpoint (/metrics, /healthz, /readyz, /api/v1/).
type Admin struct {
	Address   string `yaml:"address"`    // default "127.0.0.1:9775"
	TokenFile string `yaml:"token_file"` // file holding the bearer token; "" = no token
	// Pprof serves Go's profiler under /debug/pprof/ (behind the token
	// like /metrics); off by default.
	Pprof bool `yaml:"pprof"`
}

// Store is the durable record store.
type Store struct {
	Backend   string   `yaml:"backend"`   // "badger" (default, one instance) or "postgres" (shared by several)
	Path      string   `yaml:"path"`      // badger: the directory; default "./data"
	Retention Duration `yaml:"retention"` // default key retention; default 72h

	// PostgreSQL (backend: postgres): the database several instances
	// share. DSN or DSNFile (a file holding the DSN with its password).
	DSN        string   `yaml:"dsn"`
	DSNFile    string   `yaml:"dsn_file"`
	Schema     string   `yaml:"schema"`      // the tables' schema; default smppproxy
	InstanceID string   `yaml:"instance_id"` // unique among running instances; default hostname + random suffix
	Lease      Duration `yaml:"lease"`       // heartbeat lease of an instance; default 10s, at least MinLease
	MaxConns   int      `yaml:"max_conns"`   // connections to the database; default 16
	Migrate    string   `yaml:"migrate"`     // "auto" (default) or "off": then `smppproxy store migrate` must have run

	// Memory of the embedded store (Badger). Zero = the store's own
	// default, sized for a proxy (see state.BadgerOptions).
	MemtableSize   Bytes `yaml:"memtable_size"`    // one in-memory write buffer
	NumMemtables   int   `yaml:"num_memtables"`    // buffers kept before writes stall
	BlockCacheSize Bytes `yaml:"block_cache_size"` // cache of table blocks read from disk
	IndexCacheSize Bytes `yaml:"index_cache_size"` // cache of table indexes and bloom filters
	ValueThreshold Bytes `yaml:"value_threshold"`  // larger values go to the value log
	TableSize      Bytes `yaml:"table_size"`       // Badger's tables (files) on every level
	// CommitDelay: the longest a group commit of the embedded store
	// waits for more writes while they arrive densely (0 = none, the
	// default; at most MaxCommitDelay): less CPU per submit at a modest
	// rate for up to that much more latency per write.
	CommitDelay Duration `yaml:"commit_delay"`
	// CommitLog: the store syncs each group commit to its own log (one
	// write and fdatasync) and replays it at start, instead of Badger's
	// own sync; default true (the switch is kept for one release).
	CommitLog *bool `yaml:"commit_log"`
	// RecentAnswers: how many settled answers the proxy keeps in memory
	// (either backend), so that their retries are answered without
	// reading the store; 0 = DefaultRecentAnswers, at most
	// MaxRecentAnswers. Each takes ~190 bytes once kept.
	RecentAnswers int `yaml:"recent_answers"`
}

// Log configures the process logger.
type Log struct {
	Format          string `yaml:"format"`           // "text" (default) or "json"
	Level           string `yaml:"level"`            // "debug", "info" (default), "warn", "error"
	RedactAddresses bool   `yaml:"redact_addresses"` // mask phone numbers in logs; default true
}

// Store backends, log formats and levels.
const (
	BackendBadger   = "badger"
	BackendPostgres = "postgres"

	MigrateAuto = "auto"
	MigrateOff  = "off"

	LogText = "text"
	LogJSON = "json"
)

// Account is an ESME identity and its policy.
type Account struct {
	SystemID        string        `yaml:"system_id"`        // required, at most 15 octets
	Password        string        `yaml:"password"`         // plain text, at most 8 octets; warned about
	PasswordHash    string        `yaml:"password_hash"`    // bcrypt; exactly one of Password and PasswordHash is set
	AllowedNetworks []string      `yaml:"allowed_networks"` // CIDRs or bare IPs; empty = any address (see Allows)
	MaxBinds        int           `yaml:"max_binds"`        // concurrent binds of the account; default 4
	Throughput      int           `yaml:"throughput"`       // submits per second over all sessions; 0 = unlimited (default)
	Window          int           `yaml:"window"`           // outstanding submits per session; default 50
	Route           []string      `yaml:"route"`            // upstream names, at least one
	MessageID       MessageIDMode `yaml:"message_id"`       // default passthrough
	ProxyID         ProxyIDStyle  `yaml:"proxy_id"`         // what proxy-issued ids look like (message_id: proxy)
	DLRRetention    Duration      `yaml:"dlr_retention"`    // how long undelivered receipts are queued; default 72h
	DLRRedelivery   Duration      `yaml:"dlr_redelivery"`   // redelivery of an unacknowledged receipt; default 10s
	DLRWindow       int           `yaml:"dlr_window"`       // deliver_sm awaiting their response per receiving session; default 10
	Idempotency     Idempotency   `yaml:"idempotency"`
}

// ProxyIDStyle says what proxy-issued message ids look like.
type ProxyIDStyle struct {
	Format IDFormat `yaml:"format"` // hex (default) or dec
	Length int      `yaml:"length"` // octets, 8..64; default 20
}

// MessageIDMode says which message_id an ESME is given.
type MessageIDMode string

// Message id modes.
const (
	MessageIDPassthrough MessageIDMode = "passthrough" // the upstream's message_id
	MessageIDProxy       MessageIDMode = "proxy"       // a proxy-issued id; receipts are rewritten to it
)

// Idempotency is an account's deduplication policy (SPEC §3, §5).
type Idempotency struct {
	Key               KeyPolicy        `yaml:"key"`                // default tlv
	TLVTag            Tag              `yaml:"tlv_tag"`            // default 0x1400
	MissingKey        MissingKeyPolicy `yaml:"missing_key"`        // default forward
	Retention         Duration         `yaml:"retention"`          // 0 in the file = store.retention; after Parse never 0
	FingerprintWindow Duration         `yaml:"fingerprint_window"` // default 60s
	InflightWait      Duration         `yaml:"inflight_wait"`      // default 3s
	ConflictStatus    Status           `yaml:"conflict_status"`    // default 0x00000400
	UnknownStatus     Status           `yaml:"unknown_status"`     // default 0x00000008
	OnUnknown         UnknownPolicy    `yaml:"on_unknown"`         // default hold
	UnknownTimeout    Duration         `yaml:"unknown_timeout"`    // for resend_after; default 0
}

// KeyPolicy says where an account's idempotency key comes from.
type KeyPolicy string

// Key policies.
const (
	KeyTLV         KeyPolicy = "tlv"
	KeyFingerprint KeyPolicy = "fingerprint"
	// KeyReference keys a submit by its user_message_reference TLV
	// (0x0204, which many client libraries can set) together with its
	// fingerprint, within fingerprint_window: the reference is 16 bits and
	// wraps, so a reused reference with other content is a new message,
	// not a conflict, and the same content with another reference is a
	// message the client meant to send again.
	KeyReference KeyPolicy = "reference"
	KeyNone      KeyPolicy = "none"
)

// MissingKeyPolicy says what happens to a submit without the key TLV.
type MissingKeyPolicy string

// Missing-key policies.
const (
	MissingForward     MissingKeyPolicy = "forward"
	MissingReject      MissingKeyPolicy = "reject"
	MissingFingerprint MissingKeyPolicy = "fingerprint"
)

// UnknownPolicy says what happens to a record whose outcome is unknown.
type UnknownPolicy string

// Unknown-outcome policies.
const (
	// UnknownHold answers unknown_status until the record is resolved.
	UnknownHold UnknownPolicy = "hold"
	// UnknownResendAfter lets one client retry forward again once the
	// record has been unknown for unknown_timeout (at-least-once opt-in).
	UnknownResendAfter UnknownPolicy = "resend_after"
	// UnknownResend lets every client retry forward again at once: for an
	// upstream that deduplicates by the forwarded key TLV itself.
	UnknownResend UnknownPolicy = "resend"
)

// Upstream is an SMSC the proxy binds to.
type Upstream struct {
	Name            string   `yaml:"name"`    // required, unique; letters, digits, '-', '_', '.'
	Address         string   `yaml:"address"` // host:port
	TLS             bool     `yaml:"tls"`
	TLSCA           string   `yaml:"tls_ca"`          // PEM file of CAs trusted for this SMSC; "" = system roots
	TLSServerName   string   `yaml:"tls_server_name"` // name checked in the SMSC's certificate; "" = host of address
	SystemID        string   `yaml:"system_id"`       // required, at most 15 octets
	Password        string   `yaml:"password"`        // at most 8 octets
	SystemType      string   `yaml:"system_type"`     // at most 12 octets
	Bind            BindMode `yaml:"bind"`            // default transceiver
	Binds           int      `yaml:"binds"`           // parallel sessions; default 1
	Window          int      `yaml:"window"`          // outstanding requests per session; default 10
	Throughput      int      `yaml:"throughput"`      // submits per second over all binds; 0 = unlimited (default)
	Weight          int      `yaml:"weight"`          // share of a route; default 1; 0 = backup only
	ResponseTimeout Duration `yaml:"response_timeout"`
	RouteWait       Duration `yaml:"route_wait"`
	EnquireLink     Duration `yaml:"enquire_link"`
	RespIDFormat    IDFormat `yaml:"resp_id_format"`    // how submit_sm_resp writes message ids; default as-is
	ReceiptIDFormat IDFormat `yaml:"receipt_id_format"` // how receipts write them; default as-is
	ForwardKeyTLV   bool     `yaml:"forward_key_tlv"`   // keep the key TLV on forwarded submits
	EchoTLV         Tag      `yaml:"echo_tlv"`          // TLV the upstream echoes in receipts; 0 = none
	DeliverWindow   int      `yaml:"deliver_window"`    // deliver_sm/data_sm from this upstream being stored at once; beyond → 0x58; default 1000
	Retry           Retry    `yaml:"retry"`
}

// BindMode is the kind of session(s) the proxy holds to an upstream.
type BindMode string

// Upstream bind modes.
const (
	BindTransceiver         BindMode = "transceiver"
	BindTransmitter         BindMode = "transmitter"
	BindTransmitterReceiver BindMode = "transmitter+receiver" // a TX and an RX session per bind
)

// Sessions is what m opens per bind: sessions of type bind, plus as many
// receiver sessions when receivers is set ("transmitter+receiver"). An
// unknown mode (refused by validation) gives smpp.BindNone.
func (m BindMode) Sessions() (bind smpp.BindType, receivers bool) {
	switch m {
	case BindTransceiver:
		return smpp.BindTransceiver, false
	case BindTransmitter:
		return smpp.BindTransmitter, false
	case BindTransmitterReceiver:
		return smpp.BindTransmitter, true
	}
	return smpp.BindNone, false
}

// IDFormat is how an upstream writes message ids.
type IDFormat string

// Message id formats.
const (
	IDAsIs IDFormat = "as-is"
	IDHex  IDFormat = "hex"
	IDDec  IDFormat = "dec"
)

// Retry bounds the retries of a submit the upstream answered with a
// temporary error.
type Retry struct {
	Attempts int      `yaml:"attempts"` // total attempts, the first included; default 3
	Budget   Duration `yaml:"budget"`   // total time for all attempts; default 5s
}

// MORoute sends mobile-originated messages whose destination address starts
// with Prefix to Account.
type MORoute struct {
	Prefix  string `yaml:"prefix"`
	Account string `yaml:"account"`
}

// Default returns a configuration with every top-level default applied and
// no accounts, upstreams or MO routes. It is not valid as it is: add at
// least one account and one upstream (see AccountDefaults and
// UpstreamDefaults) before calling Validate.
func Default() *Config {
	return &Config{
		Listen: Listen{
			Address:     "0.0.0.0:2775",
			BindTimeout: Duration(10 * time.Second),
			MaxPDUSize:  65536,
			EnquireLink: Duration(30 * time.Second),

			MaxConnections:      10000,
			MaxConnectionsPerIP: 200,
		},
		Admin: Admin{Address: "127.0.0.1:9775"},
		Store: Store{
			Backend:   BackendBadger,
			Path:      "./data",
			Retention: Duration(72 * time.Hour),
			Lease:     Duration(10 * time.Second),
			MaxConns:  16,
			Migrate:   MigrateAuto,
			Schema:    "smppproxy",
		},
		Log:             Log{Format: LogText, Level: "info", RedactAddresses: true},
		ShutdownTimeout: Duration(10 * time.Second),
		ProxySystemID:   "smppproxy",
		MemoryLimit:     DefaultMemoryLimit,
	}
}

// DefaultMemoryLimit is memory_limit's default. memory_limit is the Go
// runtime's soft memory limit for serve (runtime/debug.SetMemoryLimit):
// the garbage collector runs more often as the memory it manages nears
// it, instead of letting the heap double between collections (the
// embedded store's flushes and compactions leave much garbage). The
// default trims the peak of a proxy with a million keys (920 -> 540 MB
// measured) for some throughput (x0.81 while preloading them); a limit
// near its live heap (measured: 96 or 192 MiB) makes the collector take
// most of the CPU. The GOMEMLIMIT environment
// variable, when set, wins.
const DefaultMemoryLimit = Bytes(384 << 20)

// GCPercentOrDefault is the garbage collector's target percentage for
// serve (runtime/debug.SetGCPercent, as GOGC): gc_percent, or Go's 100
// when it is 0. Raising it trades memory for CPU, and only pays with
// PostgreSQL, where the heap is small and short-lived garbage is most of
// it: 300 took ~14% off the proxy's CPU per submit there, for 60-80 MB
// more (measured: 102 -> 88 µs per fresh submit alone; in the whole
// bench, where PostgreSQL shares the cores, +0-4% submits/s and peak RSS
// 118 -> ~200 MB). With the embedded store it bought no CPU for 100 MB
// more. memory_limit still bounds the heap either way.
func (c *Config) GCPercentOrDefault() int {
	if c.GCPercent != 0 {
		return c.GCPercent
	}
	return 100
}

// MaxProcsOrDefault is serve's GOMAXPROCS: max_procs, or, when it is 0,
// goDefault (what the Go runtime chose: the host's CPUs, or a container's
// CPU limit rounded up) raised to MinAutoProcs with the embedded store on
// a host of fewer than MinAutoProcs CPUs that no CPU limit holds
// (cpuLimited false). Measured on 2 CPUs only (below).
//
// Why: the embedded store's compactions run many goroutines at once (its
// table builders, and several block compressors for each), and on a
// 2-CPU host they hold the runtime's processors for up to its 10 ms time
// slice each, while the goroutines that answer submits wait in the run
// queues behind them. With more processors than CPUs the kernel shares
// the CPUs among their threads in far shorter slices, and a thread woken
// to answer a submit gets a CPU soon. Measured on a 2-CPU host: 5,000
// submits/s offered right after a burst of 300,000 fresh submits gave a
// p99 of 45-152 ms (median ~110, 14 runs) with 2 and 33-74 ms (median
// ~56, 8 runs) with 4. In `bench --processes --rounds 3 --count 60000`,
// the 5,000/s run of rounds 2 and 3 (the store then holds a few hundred
// thousand submits and their receipts, and compacts them while the run
// writes: a trace showed a burst of ~1.3 s in which compaction ran on
// three of four processors and goroutines waited up to 47 ms for one)
// gave a p99 of 64-106 ms (median 82, 8 rounds) with 4, 16-75 (median
// 35, 8 rounds) with 8 and 24-86 (median 40, 12 rounds) with 16; the
// fresh submits/s at saturation were the same with 8 as with 4 (medians
// 16,873 and 16,802) and the CPU per submit too (80.9 and 82.6 µs), where
// 16 cost ~8% of the submits/s and ~12% more CPU per submit. With
// PostgreSQL the proxy compacts nothing and shares the CPUs with the
// database, so Go's choice stands; under a CPU limit, more threads than
// the limit would only be throttled.
func (c *Config) MaxProcsOrDefault(goDefault int, cpuLimited bool) int {
	if c.MaxProcs != 0 {
		return c.MaxProcs
	}
	if c.Store.Backend != BackendPostgres && !cpuLimited && goDefault < MinAutoProcs {
		return MinAutoProcs
	}
	return goDefault
}

// MinAutoProcs is the fewest processors MaxProcsOrDefault gives the
// embedded store's proxy on a host of fewer than MinAutoProcs CPUs.
const MinAutoProcs = 8

// MaxMaxProcs bounds max_procs.
const MaxMaxProcs = 1024

// MinGCPercent and MaxGCPercent bound gc_percent (other than 0).
const (
	MinGCPercent = 25
	MaxGCPercent = 1000
)

// MinMaxConns is the smallest store.max_conns accepted: what one instance
// may use at once on PostgreSQL (two write batches in flight, each up to
// two transactions; four groups of reads; the LISTEN connection; one for
// the other reads). Fewer, and its writes would wait for a connection.
const MinMaxConns = 10

// MinMemoryLimit is the smallest memory_limit accepted (other than 0):
// below it the collector would run nearly all the time.
const MinMemoryLimit = Bytes(32 << 20)

// MinLease is the shortest store.lease: the heartbeat checks every twelfth
// of it, and a lease shorter than the database's answers would be lost.
const MinLease = time.Second

// The bounds of store.table_size: below MinTableSize a table holds few
// blocks and the store many files; above MaxTableSize one compaction
// builds tables of hundreds of MiB in memory.
const (
	MinTableSize = Bytes(64 << 10)
	MaxTableSize = Bytes(64 << 20)
)

// The default and the bound of store.recent_answers: 262,144 answers is
// ~49 MB once all are kept, about nine seconds of answers at 30,000
// submits/s; 4,194,304 is ~740 MB.
const (
	DefaultRecentAnswers = 1 << 18
	MaxRecentAnswers     = 1 << 22
)

// MaxCommitDelay bounds store.commit_delay: every write of a submit may
// wait that long, and a submit makes two in a row.
const MaxCommitDelay = Duration(10 * time.Millisecond)

// AccountDefaults returns an Account with every default applied; set at
// least SystemID, a password and Route. Idempotency.Retention is the default
// store retention (72h).
func AccountDefaults() Account {
	return Account{
		MaxBinds:      4,
		Window:        50,
		MessageID:     MessageIDPassthrough,
		DLRRetention:  Duration(72 * time.Hour),
		DLRRedelivery: Duration(10 * time.Second),
		DLRWindow:     10,
		Idempotency: Idempotency{
			Key:               KeyTLV,
			TLVTag:            0x1400,
			MissingKey:        MissingForward,
			Retention:         Duration(72 * time.Hour),
			FingerprintWindow: Duration(60 * time.Second),
			InflightWait:      Duration(3 * time.Second),
			ConflictStatus:    0x00000400,
			UnknownStatus:     0x00000008,
			OnUnknown:         UnknownHold,
		},
	}
}

// UpstreamDefaults returns an Upstream with every default applied; set at
// least Name, Address and SystemID.
func UpstreamDefaults() Upstream {
	return Upstream{
		Bind:            BindTransceiver,
		Binds:           1,
		Window:          10,
		Weight:          1,
		ResponseTimeout: Duration(10 * time.Second),
		RouteWait:       Duration(2 * time.Second),
		EnquireLink:     Duration(30 * time.Second),
		RespIDFormat:    IDAsIs,
		ReceiptIDFormat: IDAsIs,
		DeliverWindow:   1000,
		Retry:           Retry{Attempts: 3, Budget: Duration(5 * time.Second)},
	}
}

// setDefaults is called by the decoder on every list element and pointer it
// allocates, before the file's values are decoded into it.
func (a *Account) setDefaults() {
	*a = AccountDefaults()
	a.Idempotency.Retention = 0 // resolved to store.retention after decoding
}

func (u *Upstream) setDefaults() { *u = UpstreamDefaults() }

func (t *ListenTLS) setDefaults() { t.Address = "0.0.0.0:3550" }

// Load reads and parses the configuration file at path. See Parse; the
// files it names are read by CheckFiles.
func Load(path string) (*Config, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// CheckFiles reads the files the configuration names and the proxy opens
// only once running (see checkFiles), so that `config check`, a start and
// a reload report them with their line rather than failing half-way.
func (c *Config) CheckFiles() error {
	if errs := c.checkFiles(true); len(errs) > 0 {
		return newErrors(errs)
	}
	return nil
}

// CheckReloadFiles is CheckFiles for a reload: the TLS files alone (the
// admin token and the DSN are read at start, and a reload leaves them).
func (c *Config) CheckReloadFiles() error {
	if errs := c.checkFiles(false); len(errs) > 0 {
		return newErrors(errs)
	}
	return nil
}

// Parse parses and validates a configuration; name is the file name used in
// errors. Absent values get their defaults. When anything is wrong the error
// is an *Errors listing every problem found, each with its line.
func Parse(data []byte, name string) (*Config, error) {
	cfg := Default()
	d := newDecoder(name, len(data))
	if !d.document(data, cfg) {
		return nil, newErrors(d.errs)
	}
	for i := range cfg.Accounts {
		if cfg.Accounts[i].Idempotency.Retention == 0 {
			cfg.Accounts[i].Idempotency.Retention = cfg.Store.Retention
		}
	}
	cfg.src = &d.source
	errs := d.errs
	for _, e := range cfg.check() {
		// A value that could not be decoded was already reported; its
		// default would only draw a second, confusing complaint.
		if !within(e.Path, d.errs) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return nil, newErrors(errs)
	}
	return cfg, nil
}

// within reports whether path is at or below the path of one of errs (an
// error about the whole file covers every path).
func within(path string, errs []Error) bool {
	for _, e := range errs {
		if e.Path == "" || path == e.Path || strings.HasPrefix(path, e.Path+".") || strings.HasPrefix(path, e.Path+"[") {
			return true
		}
	}
	return false
}

// Validate checks c as Parse does. For a configuration built in Go the
// errors carry paths but no lines.
func (c *Config) Validate() error {
	if errs := c.check(); len(errs) > 0 {
		return newErrors(errs)
	}
	return nil
}

// Account returns the account with that system_id, or nil.
func (c *Config) Account(systemID string) *Account {
	for i := range c.Accounts {
		if c.Accounts[i].SystemID == systemID {
			return &c.Accounts[i]
		}
	}
	return nil
}

// Upstream returns the upstream with that name, or nil.
func (c *Config) Upstream(name string) *Upstream {
	for i := range c.Upstreams {
		if c.Upstreams[i].Name == name {
			return &c.Upstreams[i]
		}
	}
	return nil
}

// Allows reports whether a bind from ip is allowed by AllowedNetworks; an
// empty list allows every address. IPv4-mapped IPv6 addresses are compared
// as IPv4.
func (a *Account) Allows(ip netip.Addr) bool {
	if len(a.AllowedNetworks) == 0 {
		return true
	}
	ip = ip.Unmap()
	for _, s := range a.AllowedNetworks {
		if p, err := parsePrefix(s); err == nil && p.Contains(ip) {
			return true
		}
	}
	return false
}

// parsePrefix reads a CIDR, or a bare IP meaning /32 or /128.
func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	ip = ip.Unmap()
	return netip.PrefixFrom(ip, ip.BitLen()), nil
}
