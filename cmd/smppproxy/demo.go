package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/proxy"
	"github.com/smppproxy/smppproxy/smpp"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "run an SMSC simulator, the proxy and a scripted ESME that retries, reconnects and restarts; show what reached the SMSC",
		Description: "Everything runs in this process on 127.0.0.1 with a temporary store. The command exits 0\n" +
			"only if no idempotency key reached the simulated SMSC twice and every retry of an accepted\n" +
			"submit got the message_id of the original.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "keys", Value: 20, Usage: "number of OTP messages of the first phase (1..500)"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log the proxy's decisions to stderr (debug level)"},
		},
		Action: func(c *cli.Context) error {
			log := slog.New(slog.DiscardHandler)
			if c.Bool("verbose") {
				log = slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}
			rep, err := runDemo(c.Context, demoOptions{Out: c.App.Writer, Logger: log, Keys: c.Int("keys")})
			if err != nil {
				return err
			}
			return rep.Err()
		},
	}
}

// demoOptions configure runDemo. Zero values take the defaults.
type demoOptions struct {
	Out    io.Writer
	Logger *slog.Logger
	// Keys is the number of OTP messages of phase A (default 20).
	Keys int
	// GiveUp is how long the ESME waits before it gives up on a submit
	// (default 500ms); ResponseTimeout the proxy's upstream
	// response_timeout (default 1s); SlowDelay how late the simulator
	// answers the slow submit (default 800ms, between the two).
	GiveUp, ResponseTimeout, SlowDelay time.Duration
}

func (o demoOptions) withDefaults() demoOptions {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Keys <= 0 {
		o.Keys = 20
	}
	if o.GiveUp <= 0 {
		o.GiveUp = 500 * time.Millisecond
	}
	if o.ResponseTimeout <= 0 {
		o.ResponseTimeout = time.Second
	}
	if o.SlowDelay <= 0 {
		o.SlowDelay = 800 * time.Millisecond
	}
	return o
}

// expectation is what the proxy promises for one attempt.
type expectation int

const (
	expectNew      expectation = iota // accepted with a message id of its own
	expectSame                        // accepted with the message id the ESME got first for this key
	expectConflict                    // conflict_status
	expectGiveUp                      // no answer before the ESME gives up
	expectUnknown                     // unknown_status: held, never resent
)

// demoRow is one submit of the scripted ESME.
type demoRow struct {
	Key       string
	Session   string
	Seq       uint32
	Status    smpp.Status
	MessageID string
	Err       error
	Note      string
	OK        bool
}

type demoPhase struct {
	Title string
	Rows  []demoRow
}

// demoReport is what the demo observed.
type demoReport struct {
	Phases   []*demoPhase
	Attempts int
	// Outcomes are the proxy's decisions (dedup outcome → count), summed
	// over both proxy runs.
	Outcomes     map[dedup.Outcome]uint64
	ReachedSMSC  int64
	DistinctKeys int
	Duplicates   map[string]int
	// IDMismatches lists retries of an accepted submit answered with
	// another message id; Unexpected every other answer the proxy does not
	// promise.
	IDMismatches []string
	Unexpected   []string
	Elapsed      time.Duration
}

// Err is nil when the demo showed what it promises.
func (r *demoReport) Err() error {
	var why []string
	if n := len(r.Duplicates); n > 0 {
		why = append(why, fmt.Sprintf("%d key(s) reached the SMSC more than once", n))
	}
	if n := len(r.IDMismatches); n > 0 {
		why = append(why, fmt.Sprintf("%d retried accepted submit(s) got another message_id", n))
	}
	if n := len(r.Unexpected); n > 0 {
		why = append(why, fmt.Sprintf("%d unexpected answer(s)", n))
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New("demo failed: " + strings.Join(why, "; "))
}

const (
	demoAccount  = "demo"
	demoPassword = "demo-pw"
	demoSMSCUser = "smppproxy"
	demoSMSCPass = "smsc-pw"
)

// demo is the state of one run.
type demo struct {
	o        demoOptions
	sim      *sim.Simulator
	dir      string
	cfg      *config.Config
	app      *proxy.App
	esme     *esme.Client
	sessions int
	session  string
	first    map[string]string // key → the first message id the ESME got
	rep      *demoReport
	phase    *demoPhase
	counts   map[dedup.Outcome]uint64 // outcomes of proxy runs already shut down
	// keys are the OTPs of phase A; the simulator never answers dropKey
	// and answers slowKey late; lateKey is first sent after the restart.
	keys                      []string
	dropKey, slowKey, lateKey string
}

func runDemo(ctx context.Context, o demoOptions) (*demoReport, error) {
	o = o.withDefaults()
	if o.Keys > 500 {
		return nil, fmt.Errorf("demo: --keys %d: at most 500", o.Keys)
	}
	ctx, cancel := context.WithTimeout(ctx, 50*time.Second)
	defer cancel()
	start := time.Now()
	d := &demo{o: o, first: map[string]string{}, rep: &demoReport{}, counts: map[dedup.Outcome]uint64{}}
	defer d.close()
	n := o.Keys
	d.keys = make([]string, n+3)
	for i := range d.keys {
		d.keys[i] = fmt.Sprintf("otp-%02d", i+1)
	}
	d.dropKey, d.slowKey, d.lateKey = d.keys[n], d.keys[n+1], d.keys[n+2]
	d.keys = d.keys[:n]
	if err := d.setUp(ctx); err != nil {
		return nil, err
	}
	d.printIntro()
	for _, phase := range []func(context.Context) error{d.retries, d.faults, d.restart} {
		if err := phase(ctx); err != nil {
			return nil, err
		}
	}
	r := d.rep
	r.Outcomes = d.outcomes()
	r.ReachedSMSC = d.sim.Total()
	r.DistinctKeys = len(d.sim.Counts())
	r.Duplicates = d.sim.Duplicates()
	r.Elapsed = time.Since(start)
	r.print(o.Out)
	return r, nil
}

// setUp starts the simulator (which never answers dropKey and answers
// slowKey late) and the proxy on a temporary store.
func (d *demo) setUp(ctx context.Context) error {
	o := d.o
	var err error
	d.sim, err = sim.Start("127.0.0.1:0", sim.Config{
		SystemID: demoSMSCUser, Password: demoSMSCPass, Logger: o.Logger.With("component", "smsc-sim"),
		Fault: func(c sim.Call) sim.Action {
			switch c.Key {
			case d.dropKey:
				return sim.Action{Drop: true}
			case d.slowKey:
				return sim.Action{Delay: o.SlowDelay}
			}
			return sim.Action{}
		},
	})
	if err != nil {
		return fmt.Errorf("demo: simulator: %w", err)
	}
	dir, err := os.MkdirTemp("", "smppproxy-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.dir = dir // removed by d.close, after the store is closed
	d.cfg, err = demoConfig(d.sim.Addr(), dir, o.ResponseTimeout)
	if err != nil {
		return err
	}
	return d.startProxy(ctx)
}

func (d *demo) printIntro() {
	w, o := d.o.Out, d.o
	fmt.Fprintf(w, "smppproxy demo: a scripted ESME retries, reconnects and restarts the proxy; does any OTP reach the SMSC twice?\n\n")
	fmt.Fprintf(w, "  SMSC simulator  %s  (never answers %s; answers %s after %v)\n", d.sim.Addr(), d.dropKey, d.slowKey, o.SlowDelay)
	fmt.Fprintf(w, "  smppproxy       %s  (temporary store %s, upstream response_timeout %v)\n", d.app.Addr(), d.dir, o.ResponseTimeout)
	fmt.Fprintf(w, "  ESME            system_id %q, key in TLV 0x1400; gives up on a submit after %v\n", demoAccount, o.GiveUp)
}

// submitAll submits every key of keys with the same expectation.
func (d *demo) submitAll(ctx context.Context, keys []string, want expectation) error {
	for _, k := range keys {
		if err := d.submit(ctx, k, 0, want, 0); err != nil {
			return err
		}
	}
	return nil
}

// retries are phases A to D: the OTPs, retries on the same session and
// after a reconnect, and a key reused for another OTP.
func (d *demo) retries(ctx context.Context) error {
	n := len(d.keys)
	if err := d.connect(ctx); err != nil {
		return err
	}
	d.begin(fmt.Sprintf("A. %d OTP messages, one idempotency key each", n))
	if err := d.submitAll(ctx, d.keys, expectNew); err != nil {
		return err
	}
	d.begin("B. the ESME retries some of them on the same session (same key, same OTP)")
	if err := d.submitAll(ctx, d.keys[:min(5, n)], expectSame); err != nil {
		return err
	}
	d.begin("C. the connection drops (no unbind); the ESME reconnects and retries every key")
	d.esme.Close()
	if err := d.connect(ctx); err != nil {
		return err
	}
	if err := d.submitAll(ctx, d.keys, expectSame); err != nil {
		return err
	}
	d.begin("D. a bug in the ESME reuses a key for another OTP")
	return d.submit(ctx, d.keys[min(2, n-1)], 1, expectConflict, 0)
}

// faults is phase E: the SMSC never answers dropKey and answers slowKey
// late; the ESME gives up and retries.
func (d *demo) faults(ctx context.Context) error {
	d.begin(fmt.Sprintf("E. the SMSC never answers %s and answers %s late; the ESME gives up and retries", d.dropKey, d.slowKey))
	for _, step := range []struct {
		key  string
		want expectation
		wait time.Duration
	}{
		{d.dropKey, expectGiveUp, d.o.GiveUp},
		{d.dropKey, expectUnknown, 0}, // joins the submit still in flight
		{d.dropKey, expectUnknown, 0}, // the record is unknown now
		{d.slowKey, expectGiveUp, d.o.GiveUp},
		{d.slowKey, expectSame, 0}, // joins the submit still in flight
		{d.slowKey, expectSame, 0}, // replayed
	} {
		if err := d.submit(ctx, step.key, 0, step.want, step.wait); err != nil {
			return err
		}
	}
	return nil
}

// restart is phase F: the proxy restarts on the same store; the ESME
// reconnects and retries. The proxy is stopped at the end.
func (d *demo) restart(ctx context.Context) error {
	d.begin("F. the proxy restarts on the same store; the ESME reconnects and retries")
	d.esme.Close()
	if err := d.stopProxy(ctx); err != nil {
		return err
	}
	if err := d.startProxy(ctx); err != nil {
		return err
	}
	if err := d.connect(ctx); err != nil {
		return err
	}
	for _, step := range []struct {
		key  string
		want expectation
	}{{d.keys[0], expectSame}, {d.slowKey, expectSame}, {d.dropKey, expectUnknown}, {d.lateKey, expectNew}} {
		if err := d.submit(ctx, step.key, 0, step.want, 0); err != nil {
			return err
		}
	}
	d.esme.Close()
	d.printPhase()
	return d.stopProxy(ctx)
}

// demoConfig is the proxy configuration of the demo: one account, one
// upstream (the simulator) that receives the key TLV so the simulator can
// count per key.
func demoConfig(smsc, dir string, responseTimeout time.Duration) (*config.Config, error) {
	cfg := config.Default()
	cfg.Listen.Address = "127.0.0.1:0"
	cfg.Admin.Address = "127.0.0.1:0"
	cfg.Store.Path = dir
	cfg.ShutdownTimeout = config.Duration(5 * time.Second)
	acc := config.AccountDefaults()
	acc.SystemID, acc.Password, acc.Route = demoAccount, demoPassword, []string{"smsc"}
	up := config.UpstreamDefaults()
	up.Name, up.Address, up.SystemID, up.Password = "smsc", smsc, demoSMSCUser, demoSMSCPass
	up.ResponseTimeout = config.Duration(responseTimeout)
	up.ForwardKeyTLV = true
	cfg.Accounts = []config.Account{acc}
	cfg.Upstreams = []config.Upstream{up}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	return cfg, nil
}

func (d *demo) startProxy(ctx context.Context) error {
	app, err := proxy.New(proxy.Options{Config: d.cfg, Logger: d.o.Logger})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := app.Start(); err != nil {
		app.Close()
		return fmt.Errorf("demo: %w", err)
	}
	d.app = app
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := app.WaitUpstreams(wctx); err != nil {
		return fmt.Errorf("demo: the proxy did not bind to the simulator: %w", err)
	}
	return nil
}

func (d *demo) stopProxy(ctx context.Context) error {
	for k, v := range d.appOutcomes() {
		d.counts[k] += v
	}
	sctx, cancel := context.WithTimeout(ctx, d.cfg.ShutdownTimeout.Std())
	defer cancel()
	err := d.app.Shutdown(sctx)
	d.app = nil
	if err != nil {
		return fmt.Errorf("demo: proxy shutdown: %w", err)
	}
	return nil
}

// demoOutcomes are the engine's outcomes, the five the report names first.
var demoOutcomes = dedup.Outcomes()

func (d *demo) appOutcomes() map[dedup.Outcome]uint64 {
	m := map[dedup.Outcome]uint64{}
	if d.app != nil {
		for _, o := range demoOutcomes {
			m[o] = d.app.Engine().Count(o)
		}
	}
	return m
}

func (d *demo) outcomes() map[dedup.Outcome]uint64 {
	m := d.appOutcomes()
	for k, v := range d.counts {
		m[k] += v
	}
	return m
}

func (d *demo) close() {
	if d.esme != nil {
		d.esme.Close()
	}
	if d.app != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = d.app.Shutdown(ctx)
		cancel()
	}
	if d.sim != nil {
		d.sim.Close()
	}
	if d.dir != "" {
		_ = os.RemoveAll(d.dir)
	}
}

func (d *demo) connect(ctx context.Context) error {
	c, err := esme.Dial(ctx, d.app.Addr(), esme.Options{SystemID: demoAccount, Password: demoPassword, Timeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("demo: ESME bind: %w", err)
	}
	d.esme = c
	d.sessions++
	d.session = fmt.Sprintf("s%d", d.sessions)
	return nil
}

func (d *demo) begin(title string) {
	d.printPhase()
	d.phase = &demoPhase{Title: title}
	d.rep.Phases = append(d.rep.Phases, d.phase)
}

// otp is the message of key (variant 1 is another OTP under the same key).
func otp(key string, variant int) esme.Submit {
	var n int
	for _, c := range key {
		n = n*31 + int(c)
	}
	code := (n*7919 + variant*104729) % 1000000
	return esme.Submit{
		Src: "DemoShop", SrcTON: 5, Dst: fmt.Sprintf("4477009%05d", n%100000), DstTON: 1, DstNPI: 1,
		Text: fmt.Appendf(nil, "Your code is %06d", code), Key: key,
	}
}

// submit sends one attempt and checks the answer against want. giveUp > 0
// is how long the ESME waits.
func (d *demo) submit(ctx context.Context, key string, variant int, want expectation, giveUp time.Duration) error {
	sctx := ctx
	if giveUp > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, giveUp)
		defer cancel()
	}
	r, err := d.esme.Submit(sctx, otp(key, variant))
	d.rep.Attempts++
	row := demoRow{Key: key, Session: d.session, Seq: r.Seq, Status: r.Status, MessageID: r.MessageID, Err: err}
	if err != nil && !errors.Is(err, esme.ErrTimeout) {
		return fmt.Errorf("demo: submit %s: %w", key, err)
	}
	if err != nil && want != expectGiveUp {
		row.Note = "timed out, expected an answer"
		d.rep.Unexpected = append(d.rep.Unexpected, key+": "+row.Note)
		d.phase.Rows = append(d.phase.Rows, row)
		return nil
	}
	first, seen := d.first[key]
	row.OK = true
	mismatch := false
	switch want {
	case expectNew:
		row.Note = "accepted, new message_id"
		if r.Status != smpp.StatusOK || r.MessageID == "" || seen {
			row.OK = false
		}
	case expectSame:
		row.Note = "same message_id: not sent again"
		switch {
		case r.Status != smpp.StatusOK:
			row.OK = false
		case !seen:
			row.Note = "joined the submit in flight: its message_id"
		case r.MessageID != first:
			row.OK, mismatch = false, true
			row.Note = fmt.Sprintf("DIFFERENT message_id (first was %s)", first)
			d.rep.IDMismatches = append(d.rep.IDMismatches, fmt.Sprintf("%s: %s, first %s", key, r.MessageID, first))
		}
	case expectConflict:
		row.Note = "conflict: key reused for another message, not sent"
		row.OK = r.Status == smpp.StatusKeyConflict
	case expectGiveUp:
		row.Note = fmt.Sprintf("no answer within %v: the ESME gives up", giveUp)
		row.OK = err != nil
	case expectUnknown:
		row.Note = "outcome unknown: held for the operator, not resent"
		row.OK = r.Status == smpp.Status(d.cfg.Accounts[0].Idempotency.UnknownStatus)
	}
	if err == nil && r.Status == smpp.StatusOK && !seen {
		d.first[key] = r.MessageID
	}
	if !row.OK && !mismatch {
		row.Note = "UNEXPECTED; wanted: " + row.Note
		d.rep.Unexpected = append(d.rep.Unexpected, fmt.Sprintf("%s (session %s seq %d): %s", key, row.Session, row.Seq, row.Note))
	}
	d.phase.Rows = append(d.phase.Rows, row)
	return nil
}

func (d *demo) printPhase() {
	p := d.phase
	if p == nil {
		return
	}
	d.phase = nil
	w := d.o.Out
	fmt.Fprintf(w, "\n%s\n", p.Title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  key\tsession\tseq\tanswer\tmessage_id\tcheck\twhat happened")
	for _, r := range p.Rows {
		answer := fmt.Sprintf("%s (0x%02X)", r.Status.String(), uint32(r.Status))
		if r.Err != nil {
			answer = "-"
		}
		id := r.MessageID
		if id == "" {
			id = "-"
		}
		mark := "ok"
		if !r.OK {
			mark = "!!"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Key, r.Session, r.Seq, answer, id, mark, r.Note)
	}
	_ = tw.Flush()
}

// lostAnswers is how many submits reached the SMSC without being counted
// as forwarded: those forwarded whose answer was lost (decided unknown).
// With no key twice at the SMSC, that is the difference.
func (r *demoReport) lostAnswers() uint64 {
	fwd := r.Outcomes[dedup.OutForwarded]
	if r.ReachedSMSC <= 0 || uint64(r.ReachedSMSC) <= fwd {
		return 0
	}
	return uint64(r.ReachedSMSC) - fwd
}

func (r *demoReport) print(w io.Writer) {
	fmt.Fprintf(w, "\nTotals (every message is an OTP; no text is shown)\n")
	row := func(label string, v any) { fmt.Fprintf(w, "  %-44s %6v\n", label, v) }
	row("submits sent by the ESME (attempts)", r.Attempts)
	fwd := r.Outcomes[dedup.OutForwarded]
	row("forwarded to the SMSC and answered", fwd)
	row("replayed from the store (same message_id)", r.Outcomes[dedup.OutReplayed])
	row("joined a submit in flight", r.Outcomes[dedup.OutJoined])
	row("conflict (key reused for other content)", r.Outcomes[dedup.OutConflict])
	row("unknown (no SMSC answer; held, not resent)", r.Outcomes[dedup.OutUnknown])
	// A submit forwarded whose answer never came is decided "unknown",
	// not "forwarded": it reached the SMSC all the same.
	lost := r.lostAnswers()
	row("  of which forwarded, the SMSC's answer lost", lost)
	var other []string
	for _, o := range demoOutcomes[5:] {
		if v := r.Outcomes[o]; v > 0 {
			other = append(other, fmt.Sprintf("%s %d", o, v))
		}
	}
	if len(other) > 0 {
		row("other proxy outcomes", strings.Join(other, ", "))
	}
	row(fmt.Sprintf("submits that reached the SMSC (%d + %d)", fwd, lost), r.ReachedSMSC)
	row("distinct keys at the SMSC", r.DistinctKeys)
	row("keys at the SMSC more than once", len(r.Duplicates))
	if len(r.Duplicates) > 0 {
		keys := make([]string, 0, len(r.Duplicates))
		for k, v := range r.Duplicates {
			keys = append(keys, fmt.Sprintf("%s ×%d", k, v))
		}
		sort.Strings(keys)
		fmt.Fprintf(w, "  duplicated at the SMSC: %s\n", strings.Join(keys, ", "))
	}
	for _, m := range r.IDMismatches {
		fmt.Fprintf(w, "  message_id changed on retry: %s\n", m)
	}
	for _, u := range r.Unexpected {
		fmt.Fprintf(w, "  unexpected: %s\n", u)
	}
	if err := r.Err(); err != nil {
		fmt.Fprintf(w, "\nVerdict: FAIL: %v\n", strings.TrimPrefix(err.Error(), "demo failed: "))
		return
	}
	fmt.Fprintf(w, "\nVerdict: PASS: %d submits from the ESME, %d reached the SMSC, no key twice; every retry of an accepted OTP got its original message_id (%.1fs)\n",
		r.Attempts, r.ReachedSMSC, r.Elapsed.Seconds())
}
