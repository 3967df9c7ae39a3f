// Command smppproxy is an idempotent SMPP proxy: legacy ESMEs bind to it as
// to an SMSC, and a retried submit_sm never becomes a second SMS. This
// package is wiring only: flags, configuration, signals.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	app := &cli.App{
		Name:  "smppproxy",
		Usage: "an SMPP proxy that makes submit_sm idempotent",
		Commands: []*cli.Command{
			serveCommand(),
			demoCommand(),
			simCommand(),
			benchCommand(),
			configCommand(),
		},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "smppproxy:", err)
		os.Exit(1)
	}
}
