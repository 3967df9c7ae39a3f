package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/session"
)

// switchNote is what the help of every drain and disable says.
const switchNote = "It lasts until undone or until the proxy restarts, and is not written to the configuration file."

func reloadCommand() *cli.Command {
	return &cli.Command{
		Name:  "reload",
		Usage: "make the running proxy re-read its configuration file (as SIGHUP does) and print what changed (admin API)",
		Description: "Applied: accounts (added, removed, credentials, throughput, window, routes, idempotency…), MO routes,\n" +
			"upstream weights and retries, log.level. Listed under RESTART NEEDED and not applied: listen, admin, store,\n" +
			"log.format, the upstreams' connections. A file that does not parse or validate changes nothing: the\n" +
			"command fails with each problem and its file:line.",
		Flags: adminFlags(),
		Action: adminAction(0, "", func(c *cli.Context, cl *admin.Client, _ []string) (admin.Reloaded, error) {
			return cl.Reload(c.Context)
		}, printReloaded),
	}
}

func printReloaded(w io.Writer, r admin.Reloaded) {
	if len(r.Applied) == 0 {
		fmt.Fprintln(w, "APPLIED: nothing changed")
	} else {
		fmt.Fprintf(w, "APPLIED (%d)\n", len(r.Applied))
		for _, l := range r.Applied {
			fmt.Fprintln(w, "  "+l)
		}
	}
	if len(r.Restart) > 0 {
		fmt.Fprintf(w, "RESTART NEEDED, not applied (%d)\n", len(r.Restart))
		for _, l := range r.Restart {
			fmt.Fprintln(w, "  "+l)
		}
	}
}

func upstreamsCommand() *cli.Command {
	return &cli.Command{
		Name:  "upstreams",
		Usage: "list, drain and resume upstreams (admin API)",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "every upstream: weight, binds up, in flight, drained, healthy",
				Flags: adminFlags(),
				Action: adminAction(0, "", func(c *cli.Context, cl *admin.Client, _ []string) (admin.UpstreamList, error) {
					l, err := cl.Upstreams(c.Context)
					return admin.UpstreamList{Upstreams: l}, err
				}, func(w io.Writer, l admin.UpstreamList) { printUpstreams(w, l.Upstreams) }),
			},
			switchCommand("drain", "NAME", "stop new submits to an upstream: routes skip it as if it were down; its binds stay up "+
				"(receipts keep coming) and submits already written to it finish. "+switchNote),
			switchCommand("resume", "NAME", "undo a drain: the upstream takes submits again"),
		},
	}
}

func accountsCommand() *cli.Command {
	return &cli.Command{
		Name:  "accounts",
		Usage: "list, disable and enable accounts (admin API)",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "every account: sessions bound, max binds, throughput, route, disabled",
				Flags: adminFlags(),
				Action: adminAction(0, "", func(c *cli.Context, cl *admin.Client, _ []string) (admin.AccountList, error) {
					l, err := cl.Accounts(c.Context)
					return admin.AccountList{Accounts: l}, err
				}, func(w io.Writer, l admin.AccountList) { printAccounts(w, l.Accounts) }),
			},
			switchCommand("disable", "NAME", "refuse an account's binds and close its bound sessions at once. "+switchNote),
			switchCommand("enable", "NAME", "undo a disable: the account may bind again"),
		},
	}
}

// switchCommand is `upstreams drain|resume NAME` or `accounts
// disable|enable NAME`.
func switchCommand(action, args, usage string) *cli.Command {
	return &cli.Command{
		Name:      action,
		Usage:     usage,
		ArgsUsage: args,
		Flags:     adminFlags(),
		Action: adminAction(1, args, func(c *cli.Context, cl *admin.Client, a []string) (admin.Switched, error) {
			return cl.Switch(c.Context, action, a[0])
		}, printSwitched),
	}
}

func printSwitched(w io.Writer, s admin.Switched) {
	what := map[string]string{"drain": "upstream %s drained", "resume": "upstream %s resumed",
		"disable": "account %s disabled", "enable": "account %s enabled"}[s.Action]
	line := fmt.Sprintf(what, s.Name)
	if !s.Changed {
		line += " (it already was; nothing changed)"
	}
	if s.Action == "disable" {
		line += fmt.Sprintf(", %d session(s) closed", s.Closed)
	}
	if s.Action == "drain" || s.Action == "disable" {
		line += "; until undone or a restart (not written to the configuration)"
	}
	fmt.Fprintln(w, line)
}

func printUpstreams(w io.Writer, list []session.Upstream) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tADDRESS\tWEIGHT\tBINDS UP\tIN-FLIGHT\tDRAINED\tHEALTHY")
	for _, u := range list {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%d\t%s\t%s\n", u.Name, u.Address, u.Weight, u.Up, u.Binds, u.InFlight, yesNo(u.Drained), yesNo(u.Healthy))
	}
	_ = tw.Flush()
}

func printAccounts(w io.Writer, list []session.Account) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSESSIONS\tMAX BINDS\tTHROUGHPUT\tROUTE\tDISABLED")
	for _, a := range list {
		tp := "unlimited"
		if a.Throughput > 0 {
			tp = fmt.Sprintf("%d/s", a.Throughput)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", a.Name, a.Sessions, a.MaxBinds, tp, dash(strings.Join(a.Route, ",")), yesNo(a.Disabled))
	}
	_ = tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
