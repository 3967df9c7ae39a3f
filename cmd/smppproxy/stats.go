package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/dedup"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:  "stats",
		Usage: "the counters that matter at a glance (admin API); --watch: rates per interval",
		Description: "With --watch, every --interval: submits/s by outcome, receipts/s, and per upstream submits/s,\n" +
			"errors/s (answers other than ESME_ROK and requests without an answer) and a sparkline of its\n" +
			"submit rate over the last 30 intervals; --json streams one JSON object per interval. Ctrl-C stops.",
		Flags: adminFlags(
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "print rates every --interval instead of the totals once"},
			&cli.DurationFlag{Name: "interval", Value: 2 * time.Second, Usage: "with --watch, the `DURATION` between two samples"},
		),
		Action: statsAction,
	}
}

// outcomeOrder is the order submits are listed in: the engine's outcomes
// (SPEC §9 order), then any other label, sorted.
var outcomeOrder = outcomeNames()

func outcomeNames() []string {
	var names []string
	for _, o := range dedup.Outcomes() {
		names = append(names, o.String())
	}
	return names
}

func printStats(w io.Writer, s *admin.Stats, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	printSubmitStats(tw, s)
	printSessionStats(tw, s)
	printUpstreamStats(tw, s)
	printStoreStats(tw, s, now)
	printReceiptStats(tw, s)
	_ = tw.Flush()
}

// printSubmitStats: submits by outcome (and by account when there are
// several), operator resolutions.
func printSubmitStats(tw io.Writer, s *admin.Stats) {
	total := 0.0
	for _, v := range s.Submits {
		total += v
	}
	fmt.Fprintf(tw, "SUBMITS\t%s\n", num(total))
	for _, o := range ordered(s.Submits, outcomeOrder) {
		fmt.Fprintf(tw, "  %s\t%s\n", o, num(s.Submits[o]))
	}
	if len(s.SubmitsByAccount) > 1 {
		for _, acc := range slices.Sorted(maps.Keys(s.SubmitsByAccount)) {
			var parts []string
			for _, o := range ordered(s.SubmitsByAccount[acc], outcomeOrder) {
				parts = append(parts, o+" "+num(s.SubmitsByAccount[acc][o]))
			}
			fmt.Fprintf(tw, "  account %s\t%s\n", acc, strings.Join(parts, ", "))
		}
	}
	if len(s.Resolved) > 0 {
		fmt.Fprintf(tw, "RESOLVED BY OPERATOR\t%s\n", joinCounts(s.Resolved, nil))
	}
}

// printSessionStats: ESME sessions open and closed.
func printSessionStats(tw io.Writer, s *admin.Stats) {
	esme := 0.0
	for _, v := range s.ESMESessions {
		esme += v
	}
	fmt.Fprintf(tw, "ESME SESSIONS\t%s", num(esme))
	if len(s.ESMESessions) > 0 {
		fmt.Fprintf(tw, " (%s)", joinCounts(s.ESMESessions, nil))
	}
	fmt.Fprintln(tw)
	if len(s.ESMEClosed) > 0 {
		fmt.Fprintf(tw, "  closed\t%s\n", joinCounts(s.ESMEClosed, nil))
	}
}

// printUpstreamStats: every upstream's binds, traffic and answers.
func printUpstreamStats(tw io.Writer, s *admin.Stats) {
	fmt.Fprintf(tw, "UPSTREAMS\t%d\n", len(s.Upstreams))
	for _, name := range slices.Sorted(maps.Keys(s.Upstreams)) {
		u := s.Upstreams[name]
		line := fmt.Sprintf("%s bound, %s in flight, %s written", num(u.Bound), num(u.InFlight), num(u.Written))
		if u.MeanLatencySeconds > 0 {
			line += fmt.Sprintf(", mean latency %s", time.Duration(u.MeanLatencySeconds*float64(time.Second)).Round(10*time.Microsecond))
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, line)
		if len(u.Responses) > 0 {
			fmt.Fprintf(tw, "    responses\t%s\n", joinCounts(u.Responses, []string{"ESME_ROK"}))
		}
		if len(u.Failed) > 0 {
			fmt.Fprintf(tw, "    no answer\t%s\n", joinCounts(u.Failed, nil))
		}
	}
	if s.RouteRetries > 0 {
		fmt.Fprintf(tw, "  internal retries\t%s\n", num(s.RouteRetries))
	}
}

// printStoreStats: writes and commits, records by state.
func printStoreStats(tw io.Writer, s *admin.Stats, now time.Time) {
	fmt.Fprintf(tw, "STORE\t%s writes in %s commits", num(s.Store.WriteOps), num(s.Store.Commits))
	if s.Store.Commits > 0 {
		fmt.Fprintf(tw, " (%.1f per fsync)", s.Store.WriteOps/s.Store.Commits)
	}
	fmt.Fprintf(tw, ", %s failed\n", num(s.Store.Failed))
	if s.Records != nil {
		when := ""
		if s.RecordsScannedAt != nil {
			when = fmt.Sprintf(" (counted %s ago)", age(*s.RecordsScannedAt, now))
		}
		fmt.Fprintf(tw, "  records%s\t%s\n", when, joinCounts(s.Records, []string{"sent", "accepted", "rejected", "unknown", "retryable"}))
	}
}

// printReceiptStats: receipts by outcome, deliveries to ESMEs, queues.
func printReceiptStats(tw io.Writer, s *admin.Stats) {
	if s.Receipts == nil && s.ReceiptQueue == nil {
		return
	}
	line := "none yet"
	if s.Receipts != nil {
		line = joinCounts(s.Receipts, receiptOrder)
	}
	fmt.Fprintf(tw, "RECEIPTS\t%s\n", line)
	if s.ReceiptDeliveries != nil {
		fmt.Fprintf(tw, "  sent to ESMEs\t%s\n", joinCounts(s.ReceiptDeliveries, []string{"acked"}))
	}
	if s.ReceiptQueue != nil {
		fmt.Fprintf(tw, "  queue (awaiting ESME ack)\t%s\n", joinCounts(s.ReceiptQueue, nil))
	}
}

// Receipt outcomes in the order of SPEC §9, then the receipt service's
// others.
var receiptOrder = []string{"routed", "queued", "duplicate", "unmatched", "matched_later", "reconciled", "mo"}

func receiptsCommand() *cli.Command {
	return &cli.Command{
		Name:  "receipts",
		Usage: "delivery receipts held by the proxy (admin API)",
		Subcommands: []*cli.Command{{
			Name: "unmatched",
			Usage: "list receipts that matched no record: kept for dlr retention and matched again " +
				"(a late submit_sm_resp, or an unknown record they settle); ids and states only, never text or numbers",
			Flags: adminFlags(
				&cli.StringFlag{Name: "upstream", Usage: "only this `UPSTREAM`"},
				&cli.IntFlag{Name: "limit", Value: admin.DefaultListLimit, Usage: fmt.Sprintf("at most `N` receipts (max %d)", admin.MaxListLimit)},
			),
			Action: adminAction(0, "", func(c *cli.Context, cl *admin.Client, _ []string) (admin.UnmatchedList, error) {
				return cl.Unmatched(c.Context, c.String("upstream"), c.Int("limit"))
			}, func(w io.Writer, l admin.UnmatchedList) { printUnmatched(w, l, time.Now()) }),
		}},
	}
}

func printUnmatched(w io.Writer, l admin.UnmatchedList, now time.Time) {
	if len(l.Receipts) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "UPSTREAM\tSEQ\tRECEIPT ID\tSTAT\tRECEIVED\tAGE\tEXPIRES")
		for _, r := range l.Receipts {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Upstream, r.Seq, dash(r.MessageID), dash(r.Stat),
				r.Received.Local().Format(timeLayout), age(r.Received, now), expiresIn(r.Expires, now))
		}
		_ = tw.Flush()
	}
	fmt.Fprintf(w, "%d unmatched receipt(s)", len(l.Receipts))
	if l.Truncated {
		fmt.Fprint(w, ", truncated: there may be more (narrow with --upstream or raise --limit)")
	}
	fmt.Fprintln(w)
}

// expiresIn says when t comes, to the second ("-" for the zero time).
func expiresIn(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return "in " + t.Sub(now).Round(time.Second).String()
}

// ordered returns m's keys: those of order first (when present), then the
// rest sorted.
func ordered(m map[string]float64, order []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range order {
		if _, ok := m[k]; ok {
			out = append(out, k)
			seen[k] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !seen[k] {
			out = append(out, k)
		}
	}
	return out
}

func joinCounts(m map[string]float64, order []string) string {
	var parts []string
	for _, k := range ordered(m, order) {
		parts = append(parts, k+" "+num(m[k]))
	}
	return strings.Join(parts, ", ")
}

func num(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprint(int64(v))
	}
	return fmt.Sprintf("%.2f", v)
}
