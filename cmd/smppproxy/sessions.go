package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
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
				Action: func(c *cli.Context) error {
					if _, err := positional(c, 0, ""); err != nil {
						return err
					}
					cl, err := adminClient(c)
					if err != nil {
						return err
					}
					list, err := cl.Sessions(c.Context)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, admin.SessionList{Sessions: nonNil(list)})
					}
					printSessions(c.App.Writer, list, time.Now())
					return nil
				},
			},
			{
				Name:      "kick",
				Usage:     "close one ESME session at once",
				ArgsUsage: "ID",
				Flags:     adminFlags(),
				Action: func(c *cli.Context) error {
					args, err := positional(c, 1, "ID")
					if err != nil {
						return err
					}
					cl, err := adminClient(c)
					if err != nil {
						return err
					}
					if err := cl.Kick(c.Context, args[0]); err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, admin.KickResult{Kicked: args[0]})
					}
					fmt.Fprintf(c.App.Writer, "session %s kicked\n", args[0])
					return nil
				},
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

// adminFlags are the flags every admin command takes (SPEC §7).
func adminFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "admin", Value: admin.DefaultURL, Usage: "admin API `URL`"},
		&cli.StringFlag{Name: "token-file", Usage: "`FILE` holding the admin bearer token"},
		&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
	}, extra...)
}

func adminClient(c *cli.Context) (*admin.Client, error) {
	cl := &admin.Client{BaseURL: c.String("admin")}
	if f := c.String("token-file"); f != "" {
		t, err := admin.ReadToken(f)
		if err != nil {
			return nil, err
		}
		cl.Token = t
	}
	return cl, nil
}

// positional returns the command's n positional arguments. urfave/cli v2
// stops parsing flags at the first argument, so flags written after the
// arguments (`keys resolve shop otp-1 --message-id 42`) are applied here.
func positional(c *cli.Context, n int, usage string) ([]string, error) {
	kinds := map[string]bool{} // flag name → takes a value
	for _, f := range c.Command.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, name := range f.Names() {
			kinds[name] = !isBool
		}
	}
	var args []string
	in := c.Args().Slice()
	for i := 0; i < len(in); i++ {
		a := in[i]
		name, hasDash := strings.CutPrefix(a, "--")
		if !hasDash {
			name, hasDash = strings.CutPrefix(a, "-")
		}
		if !hasDash || name == "" {
			args = append(args, a)
			continue
		}
		name, value, hasValue := strings.Cut(name, "=")
		takes, known := kinds[name]
		if !known {
			return nil, fmt.Errorf("flag provided but not defined: %s", a)
		}
		switch {
		case hasValue:
		case !takes:
			value = "true"
		case i+1 < len(in):
			i++
			value = in[i]
		default:
			return nil, fmt.Errorf("flag needs an argument: %s", a)
		}
		if err := c.Set(name, value); err != nil {
			return nil, fmt.Errorf("flag %s: %w", a, err)
		}
	}
	if len(args) != n {
		if n == 0 {
			return nil, fmt.Errorf("%s takes no arguments (got %q)", c.Command.FullName(), args)
		}
		return nil, fmt.Errorf("usage: smppproxy %s %s", c.Command.FullName(), usage)
	}
	return args, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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
