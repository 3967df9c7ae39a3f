package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/pgstore"
	"github.com/smppproxy/smppproxy/proxy"
	"github.com/smppproxy/smppproxy/state"
)

// storeCommand is `smppproxy store migrate|status`: the shared PostgreSQL
// store's schema and instances, from the configuration's store section.
func storeCommand() *cli.Command {
	cfgFlag := &cli.StringFlag{Name: "config", Aliases: []string{"c"}, Required: true,
		Usage: "the proxy's configuration `FILE` (store.backend: postgres, with store.dsn or store.dsn_file)"}
	return &cli.Command{
		Name:  "store",
		Usage: "the shared PostgreSQL store: apply its migrations, show its schema, instances and records",
		Subcommands: []*cli.Command{{
			Name:  "migrate",
			Usage: "apply the schema migrations this build needs (versioned, idempotent; needed before serve with store.migrate: off)",
			Flags: []cli.Flag{cfgFlag},
			Action: func(c *cli.Context) error {
				dsn, schema, err := postgresOf(c.String("config"))
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(c.Context, 5*time.Minute)
				defer cancel()
				if err := pgstore.Migrate(ctx, dsn, schema); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "schema %s is at version %d\n", schema, pgstore.SchemaVersion())
				return nil
			},
		}, {
			Name:  "status",
			Usage: "schema version, instances and their leases, records by state",
			Flags: []cli.Flag{cfgFlag, &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}},
			Action: func(c *cli.Context) error {
				dsn, schema, err := postgresOf(c.String("config"))
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
				defer cancel()
				st, err := pgstore.ReadStatus(ctx, dsn, schema)
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, st)
				}
				printStoreStatus(c.App.Writer, st)
				return nil
			},
		}},
	}
}

// postgresOf reads the shared store's DSN and schema from a configuration
// file; a configuration on the embedded store is an error saying so.
func postgresOf(path string) (dsn, schema string, err error) {
	cfg, err := config.Load(path)
	if err != nil {
		return "", "", err
	}
	if cfg.Store.Backend != config.BackendPostgres {
		return "", "", fmt.Errorf("%s: store.backend is %s; these commands are for the shared PostgreSQL store (backend: postgres)", path, cfg.Store.Backend)
	}
	dsn, err = proxy.PostgresDSN(cfg.Store)
	return dsn, cfg.Store.Schema, err
}

func printStoreStatus(w io.Writer, st pgstore.Status) {
	fmt.Fprintf(w, "schema %s at version %d (this build: %d)\n", st.Schema, st.Version, st.Want)
	if st.Version != st.Want {
		fmt.Fprintln(w, "  the schema is not at this build's version: run `smppproxy store migrate`")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nINSTANCE\tHOST\tPID\tSTARTED\tLEASE UNTIL\tLIVE")
	for _, in := range st.Instances {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%v\n", in.ID, in.Host, in.PID, in.Started.Format(time.DateTime), in.LeaseUntil.Format(time.DateTime), in.Live)
	}
	_ = tw.Flush()
	if st.RecordsCapped {
		fmt.Fprintf(w, "\nRECORDS (the first %d live records read; the store holds more)\n", pgstore.StatusCountLimit)
	} else {
		fmt.Fprintln(w, "\nRECORDS")
	}
	states := make([]state.SubmitState, 0, len(st.Records))
	for s := range st.Records {
		states = append(states, s)
	}
	slices.Sort(states)
	for _, s := range states {
		fmt.Fprintf(w, "  %-10s %d\n", s, st.Records[s])
	}
	fmt.Fprintf(w, "queued receipts and MO: %d\n", st.Queued)
}
