package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/config"
)

// Environment variables the admin commands read when --admin and
// --token-file are not given.
const (
	envAdmin     = "SMPPPROXY_ADMIN"
	envTokenFile = "SMPPPROXY_TOKEN_FILE"
)

// adminFlags are the flags every admin command takes (SPEC §7).
func adminFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "admin", Usage: "admin API `URL` or HOST:PORT (meaning http://HOST:PORT); else admin.address of --config, else $" + envAdmin +
			", else " + admin.DefaultURL},
		&cli.StringFlag{Name: "token-file", Usage: "`FILE` holding the admin bearer token; else admin.token_file of --config, else $" + envTokenFile},
		&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "the proxy's configuration `FILE`: its admin.address and admin.token_file " +
			"stand in for --admin and --token-file (before the environment)"},
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

// adminClient builds the client from, in this order: the --admin and
// --token-file flags, the configuration file of --config, the
// environment ($SMPPPROXY_ADMIN, $SMPPPROXY_TOKEN_FILE), the default URL.
// Each of the address and the token file is taken from the first source
// that gives it.
func adminClient(c *cli.Context) (*admin.Client, error) {
	addr, tokenFile, err := adminTarget(c.String("admin"), c.String("token-file"), c.String("config"), os.Getenv)
	if err != nil {
		return nil, err
	}
	cl := &admin.Client{BaseURL: adminURL(addr)}
	if tokenFile != "" {
		t, err := admin.ReadToken(tokenFile)
		if err != nil {
			return nil, err
		}
		cl.Token = t
	}
	return cl, nil
}

// adminTarget resolves the admin address and token file (see
// adminClient) from the flags' values and getenv.
func adminTarget(flagAddr, flagToken, cfgPath string, getenv func(string) string) (addr, tokenFile string, err error) {
	addr, tokenFile = flagAddr, flagToken
	if cfgPath != "" && (addr == "" || tokenFile == "") {
		cfg, err := config.Load(cfgPath)
		if err != nil {
			return "", "", err
		}
		if addr == "" {
			addr = dialable(cfg.Admin.Address)
		}
		if tokenFile == "" {
			tokenFile = cfg.Admin.TokenFile
		}
	}
	// Each from the first source that gives it: what the flags and the
	// file left empty comes from the environment.
	if addr == "" {
		addr = getenv(envAdmin)
	}
	if tokenFile == "" {
		tokenFile = getenv(envTokenFile)
	}
	if addr == "" {
		addr = admin.DefaultURL
	}
	return addr, tokenFile, nil
}

// dialable turns a listen address into one to dial: an empty or
// unspecified host (":9775", "0.0.0.0:9775", "[::]:9775") is loopback.
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return listen
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
