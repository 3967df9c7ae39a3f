package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/proxy"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the proxy",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "configuration file (YAML)", Required: true},
		},
		Action: func(c *cli.Context) error {
			cfg, err := config.Load(c.String("config"))
			if err != nil {
				return err
			}
			log := newLogger(cfg.Log)
			for _, w := range cfg.Warnings() {
				log.Warn(w)
			}
			app, err := proxy.New(proxy.Options{Config: cfg, Logger: log})
			if err != nil {
				return err
			}
			if err := app.Start(); err != nil {
				app.Close()
				return err
			}
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
			s := <-sig
			log.Info("shutting down", "signal", s.String(), "timeout", cfg.ShutdownTimeout.Std())
			ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout.Std())
			defer cancel()
			if err := app.Shutdown(ctx); err != nil {
				return fmt.Errorf("shutdown: %w", err)
			}
			log.Info("stopped")
			return nil
		},
	}
}

func newLogger(l config.Log) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(l.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if l.Format == config.LogJSON {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "configuration tools",
		Subcommands: []*cli.Command{{
			Name:  "check",
			Usage: "validate a configuration file; errors name their line",
			Flags: []cli.Flag{&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Required: true}},
			Action: func(c *cli.Context) error {
				cfg, err := config.Load(c.String("config"))
				if err != nil {
					return err
				}
				for _, w := range cfg.Warnings() {
					fmt.Fprintln(c.App.Writer, "warning:", w)
				}
				fmt.Fprintf(c.App.Writer, "%s: ok (%d accounts, %d upstreams)\n", c.String("config"), len(cfg.Accounts), len(cfg.Upstreams))
				return nil
			},
		}},
	}
}
