package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/admin"
)

// adminFlags are the flags every admin command takes (SPEC §7).
func adminFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "admin", Value: admin.DefaultURL, Usage: "admin API `URL` (or HOST:PORT, meaning http://HOST:PORT)"},
		&cli.StringFlag{Name: "token-file", Usage: "`FILE` holding the admin bearer token"},
		&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
	}, extra...)
}

// adminAction is the action of an admin command: it takes exactly n
// positional arguments (named by usage in the error), builds the client
// from the admin flags, makes the call and prints its answer as JSON with
// --json, else as table prints it.
func adminAction[T any](n int, usage string, call func(c *cli.Context, cl *admin.Client, args []string) (T, error), table func(w io.Writer, v T)) cli.ActionFunc {
	return func(c *cli.Context) error {
		args, err := positional(c, n, usage)
		if err != nil {
			return err
		}
		cl, err := adminClient(c)
		if err != nil {
			return err
		}
		v, err := call(c, cl, args)
		if err != nil {
			return err
		}
		if c.Bool("json") {
			return printJSON(c.App.Writer, v)
		}
		table(c.App.Writer, v)
		return nil
	}
}

func adminClient(c *cli.Context) (*admin.Client, error) {
	cl := &admin.Client{BaseURL: adminURL(c.String("admin"))}
	if f := c.String("token-file"); f != "" {
		t, err := admin.ReadToken(f)
		if err != nil {
			return nil, err
		}
		cl.Token = t
	}
	return cl, nil
}

// adminURL is the --admin value as a URL: a bare HOST:PORT means
// http://HOST:PORT.
func adminURL(s string) string {
	if s == "" || strings.Contains(s, "://") {
		return s
	}
	return "http://" + s
}

// commandPath is the command's name with its parents', without the
// program's ("keys show").
func commandPath(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Command.Name != "" && x.Command.Name != c.App.Name {
			names = append([]string{x.Command.Name}, names...)
		}
	}
	return strings.Join(names, " ")
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
			return nil, fmt.Errorf("%s takes no arguments (got %q)", commandPath(c), args)
		}
		return nil, fmt.Errorf("usage: smppproxy %s %s", commandPath(c), usage)
	}
	return args, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
