package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/admin"
)

func keysCommand() *cli.Command {
	segmentFlag := func() cli.Flag {
		return &cli.StringFlag{Name: "segment", Usage: "segment of a concatenated message, `N/TOTAL` (default: every segment for show, the unsegmented record for resolve)"}
	}
	return &cli.Command{
		Name:  "keys",
		Usage: "records of idempotency keys, their history, operator resolution (admin API)",
		Subcommands: []*cli.Command{
			{
				Name:      "show",
				Usage:     "show a key's record(s) and history of transitions",
				ArgsUsage: "ACCOUNT KEY",
				Flags:     adminFlags(segmentFlag()),
				Action: adminAction(2, "ACCOUNT KEY", func(c *cli.Context, cl *admin.Client, args []string) (admin.RecordList, error) {
					var seg *string
					if c.IsSet("segment") {
						s := c.String("segment")
						seg = &s
					}
					return cl.Key(c.Context, args[0], args[1], seg)
				}, func(w io.Writer, list admin.RecordList) {
					for i, r := range list.Records {
						if i > 0 {
							fmt.Fprintln(w)
						}
						printRecord(w, r)
					}
				}),
			},
			{
				Name:  "list",
				Usage: "list records, filtered by account and state",
				Flags: adminFlags(
					&cli.StringFlag{Name: "account", Usage: "only this `ACCOUNT`"},
					&cli.StringFlag{Name: "state", Usage: "only this `STATE`: sent, accepted, rejected, unknown, retryable"},
					&cli.IntFlag{Name: "limit", Value: admin.DefaultListLimit, Usage: fmt.Sprintf("at most `N` records (max %d)", admin.MaxListLimit)},
					&cli.BoolFlag{Name: "wide", Usage: "show fingerprint and untracked keys whole (they are shortened to " + strconv.Itoa(shortKey) + " characters with …)"},
				),
				Action: adminAction(0, "", func(c *cli.Context, cl *admin.Client, _ []string) (admin.RecordList, error) {
					l, err := cl.Keys(c.Context, c.String("account"), c.String("state"), c.Int("limit"))
					if err == nil && !c.Bool("json") && !c.Bool("wide") {
						shortenKeys(&l)
					}
					return l, err
				}, printRecords),
			},
			{
				Name:      "resolve",
				Usage:     "settle an unknown record: --message-id ID (the SMSC has it: accepted) or --not-sent (retryable: the next retry forwards it)",
				ArgsUsage: "ACCOUNT KEY",
				Flags: adminFlags(
					&cli.StringFlag{Name: "message-id", Usage: "the SMSC's message `ID` for it"},
					&cli.BoolFlag{Name: "not-sent", Usage: "the SMSC never got it"},
					segmentFlag(),
					&cli.StringFlag{Name: "by", Usage: "operator `NAME` recorded in the history (default: user@host)"},
				),
				Action: adminAction(2, "ACCOUNT KEY --message-id ID | --not-sent", resolveKey, printRecord),
			},
		},
	}
}

// resolveKey is the call of keys resolve.
func resolveKey(c *cli.Context, cl *admin.Client, args []string) (admin.Record, error) {
	if (c.String("message-id") == "") == !c.Bool("not-sent") {
		return admin.Record{}, errors.New("keys resolve: give exactly one of --message-id ID and --not-sent")
	}
	by := c.String("by")
	if by == "" {
		by = operatorName()
	}
	return cl.Resolve(c.Context, admin.ResolveRequest{
		Account: args[0], Key: args[1], Segment: c.String("segment"),
		MessageID: c.String("message-id"), NotSent: c.Bool("not-sent"), By: by,
	})
}

func operatorName() string {
	name := "operator"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		name += "@" + h
	}
	return name
}

const timeLayout = "2006-01-02 15:04:05.000"

func printRecord(w io.Writer, r admin.Record) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "account\t%s\n", r.Account)
	fmt.Fprintf(tw, "key\t%s (%s)\n", r.Key, r.Kind)
	fmt.Fprintf(tw, "segment\t%s\n", dash(r.Segment))
	fmt.Fprintf(tw, "state\t%s\n", r.State)
	fmt.Fprintf(tw, "message id\t%s\n", upstreamID(r))
	if r.ProxyID != "" {
		fmt.Fprintf(tw, "proxy id\t%s\n", r.ProxyID)
	}
	fmt.Fprintf(tw, "esme got id\t%s\n", esmeID(r))
	fmt.Fprintf(tw, "delivery\t%s\n", deliveryText(r))
	fmt.Fprintf(tw, "status\t%s\n", statusText(r))
	fmt.Fprintf(tw, "upstream\t%s\n", dash(r.Upstream))
	fmt.Fprintf(tw, "journal\tsession %s sequence %d\n", dash(r.Session), r.Sequence)
	fmt.Fprintf(tw, "attempts\t%d\n", r.Attempts)
	fmt.Fprintf(tw, "owner instance\t%s\n", dash(r.OwnerInstance))
	fmt.Fprintf(tw, "created\t%s\n", r.Created.Local().Format(timeLayout))
	fmt.Fprintf(tw, "updated\t%s\n", r.Updated.Local().Format(timeLayout))
	fmt.Fprintf(tw, "expires\t%s\n", r.Expires.Local().Format(timeLayout))
	fmt.Fprintf(tw, "fingerprint tag\t%s\n", r.FingerprintTag)
	_ = tw.Flush()
	if len(r.History) == 0 {
		return
	}
	fmt.Fprintln(w, "\nHISTORY")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tSTATE\tSTATUS\tSESSION\tSEQ\tMESSAGE ID\tNOTE")
	for _, e := range r.History {
		st := "-"
		if e.Status != 0 {
			st = e.StatusName
		}
		seq := "-"
		if e.Sequence != 0 {
			seq = fmt.Sprint(e.Sequence)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.At.Local().Format(timeLayout), e.State, st, dash(e.Session), seq, dash(e.MessageID), dash(e.Note))
	}
	_ = tw.Flush()
}

// printRecords prints a listing; the PROXY ID column is there only when
// some record has a proxy-issued id (an account with message_id: proxy).
func printRecords(w io.Writer, l admin.RecordList) {
	proxyIDs := false
	for _, r := range l.Records {
		proxyIDs = proxyIDs || r.ProxyID != ""
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "ACCOUNT\tKEY\tSEGMENT\tSTATE\tMESSAGE ID\t"
	if proxyIDs {
		head += "PROXY ID\t"
	}
	fmt.Fprintln(tw, head+"STATUS\tDELIVERY\tUPSTREAM\tUPDATED")
	now := time.Now()
	for _, r := range l.Records {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t", r.Account, r.Key, dash(r.Segment), r.State, dash(r.MessageID))
		if proxyIDs {
			fmt.Fprintf(tw, "%s\t", dash(r.ProxyID))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\n", statusText(r), dash(r.Delivery), dash(r.Upstream), age(r.Updated, now))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d record(s)", len(l.Records))
	if l.Truncated {
		fmt.Fprint(w, ", truncated: there may be more (narrow with --account/--state or raise --limit)")
	}
	for _, r := range l.Records {
		if r.Kind != "tlv" && strings.HasSuffix(r.Key, "…") {
			fmt.Fprint(w, "; keys ending in … are shortened (--wide shows them whole)")
			break
		}
	}
	fmt.Fprintln(w)
}

// upstreamID is the upstream's message id, marked as such when the ESME
// was given another one.
func upstreamID(r admin.Record) string {
	if r.MessageID == "" {
		return "-"
	}
	if r.ProxyID != "" {
		return r.MessageID + " (the upstream's)"
	}
	return r.MessageID
}

// esmeID is the id the ESME got in its submit_sm_resp and in receipts.
func esmeID(r admin.Record) string {
	switch {
	case r.ClientMessageID == "":
		return "- (not accepted: the ESME got no id)"
	case r.ProxyID != "" && r.ClientMessageID == r.ProxyID:
		return r.ClientMessageID + " (proxy-issued, message_id: proxy)"
	}
	return r.ClientMessageID + " (the upstream's, message_id: passthrough)"
}

// deliveryText is the delivery state and when its receipt arrived.
func deliveryText(r admin.Record) string {
	if r.Delivery == "" {
		return "- (no receipt yet)"
	}
	if r.DeliveryAt.IsZero() {
		return r.Delivery
	}
	return fmt.Sprintf("%s (receipt at %s)", r.Delivery, r.DeliveryAt.Local().Format(timeLayout))
}

// statusText is the record's last status: "-" when there is none (status 0
// of a record that was never accepted).
func statusText(r admin.Record) string {
	if r.Status == 0 && r.State != "accepted" {
		return "-"
	}
	return fmt.Sprintf("0x%08X %s", r.Status, r.StatusName)
}

// shortKey is the width keys list gives a fingerprint or untracked key
// without --wide.
const shortKey = 20

// shortenKeys cuts the fingerprint and untracked keys of l to shortKey
// characters, the last one "…" (keys show and resolve need the whole key:
// --wide prints it).
func shortenKeys(l *admin.RecordList) {
	for i := range l.Records {
		r := &l.Records[i]
		if (r.Kind == "fingerprint" || r.Kind == "untracked") && utf8.RuneCountInString(r.Key) > shortKey {
			r.Key = string([]rune(r.Key)[:shortKey-1]) + "…"
		}
	}
}
