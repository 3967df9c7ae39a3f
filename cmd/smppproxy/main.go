// Command smppproxy is an idempotent SMPP proxy: legacy ESMEs bind to it as
// to an SMSC, and a retried submit_sm never becomes a second SMS. This
// package is wiring only: flags, configuration, signals, and the admin
// commands, which talk to a running proxy over its admin API.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/internal/buildinfo"
)

func init() {
	// --version prints the build line alone, as `version` does.
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, c.App.Version) }
}

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "smppproxy:", err)
		os.Exit(1)
	}
}

// newApp is the command line (tests run it in process with their own
// Writer).
func newApp() *cli.App {
	return &cli.App{
		Name:                 "smppproxy",
		Usage:                "an SMPP proxy that makes submit_sm idempotent",
		Version:              buildinfo.Read().String(),
		EnableBashCompletion: true,
		Commands: []*cli.Command{
			serveCommand(),
			demoCommand(),
			simCommand(),
			benchCommand(),
			configCommand(),
			sessionsCommand(),
			keysCommand(),
			statsCommand(),
			receiptsCommand(),
			reloadCommand(),
			upstreamsCommand(),
			accountsCommand(),
			sendCommand(),
			hashPasswordCommand(),
			versionCommand(),
			completionCommand(),
			manCommand(),
			storeCommand(),
		},
	}
}
