package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/session"
)

func sessionsCommand() *cli.Command {
	return &cli.Command{
		Name:  "sessions",
		Usage: "live ESME sessions and upstream binds (admin API)",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list every ESME session and upstream bind (RECEIPTS PENDING: receipts and MO queued for the session's account, not yet acknowledged)",
				Flags: adminFlags(),
				Action: adminAction(0, "", func(c *cli.Context, cl *admin.Client, _ []string) (admin.SessionList, error) {
					list, err := cl.SessionList(c.Context)
					list.Sessions = nonNil(list.Sessions)
					return list, err
				}, func(w io.Writer, l admin.SessionList) {
					if l.InstanceID != "" {
						fmt.Fprintf(w, "INSTANCE %s (every session below is bound to it)\n\n", l.InstanceID)
					}
					printSessions(w, l.Sessions, time.Now())
				}),
			},
			{
				Name:      "kick",
				Usage:     "close one ESME session at once",
				ArgsUsage: "ID",
				Flags:     adminFlags(),
				Action: adminAction(1, "ID", func(c *cli.Context, cl *admin.Client, args []string) (admin.KickResult, error) {
					return admin.KickResult{Kicked: args[0]}, cl.Kick(c.Context, args[0])
				}, func(w io.Writer, r admin.KickResult) { fmt.Fprintf(w, "session %s kicked\n", r.Kicked) }),
			},
		},
	}
}

func nonNil(l []session.Info) []session.Info {
	if l == nil {
		return []session.Info{}
	}
	return l
}

func printSessions(w io.Writer, list []session.Info, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var esme, up []session.Info
	for _, s := range list {
		if s.Side == session.SideESME {
			esme = append(esme, s)
		} else {
			up = append(up, s)
		}
	}
	byID := func(a, b session.Info) int { return naturalCompare(a.ID, b.ID) }
	slices.SortStableFunc(esme, byID)
	slices.SortStableFunc(up, byID)
	fmt.Fprintf(tw, "ESME SESSIONS (%d)\n", len(esme))
	if len(esme) > 0 {
		fmt.Fprintln(tw, "ID\tACCOUNT\tBIND\tREMOTE\tBOUND FOR\tIN-FLIGHT\tREQUESTS\tRECEIPTS PENDING")
		for _, s := range esme {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.ID, dash(s.Owner), s.Bind, dash(s.Remote), age(s.Since, now), s.InFlight, s.Requests, pending(s))
		}
	}
	fmt.Fprintf(tw, "\nUPSTREAM BINDS (%d)\n", len(up))
	if len(up) > 0 {
		fmt.Fprintln(tw, "ID\tUPSTREAM\tBIND\tSTATE\tBOUND FOR\tWINDOW USE\tREQUESTS\tLAST ERROR")
		for _, s := range up {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\n", s.ID, s.Owner, s.Bind, s.State, age(s.Since, now), s.InFlight, s.Window, s.Requests, dash(s.LastError))
		}
	}
	_ = tw.Flush()
}

// pending is the RECEIPTS PENDING cell: the receipts and MO queued for the
// session's account, "-" for a session that cannot receive.
func pending(s session.Info) string {
	if s.ReceiptsPending == nil {
		return "-"
	}
	return fmt.Sprint(*s.ReceiptsPending)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// age formats how long ago t was, to the second ("-" for the zero time).
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String()
}

// naturalCompare orders strings with their digit runs compared as
// numbers: "esme-9" before "esme-10".
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, _ := strconv.ParseUint(a[:da], 10, 64)
			nb, _ := strconv.ParseUint(b[:db], 10, 64)
			if na != nb {
				if na < nb {
					return -1
				}
				return 1
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			if a[0] < b[0] {
				return -1
			}
			return 1
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

// digitRun is the length of s's leading run of ASCII digits.
func digitRun(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}
