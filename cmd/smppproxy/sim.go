package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/smpp"
)

func simCommand() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "run an SMSC simulator with fault injection",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:2776", Usage: "SMPP listen address"},
			&cli.StringFlag{Name: "stats", Value: "127.0.0.1:2777", Usage: "HTTP stats address (GET /stats: submits per key); empty = off"},
			&cli.StringFlag{Name: "system-id", Usage: "required system_id (empty = accept any)"},
			&cli.StringFlag{Name: "password", Usage: "required password"},
			&cli.DurationFlag{Name: "dlr-delay", Usage: "send a DELIVRD receipt this long after accepting a submit that asks for one (registered_delivery); 0 = none"},
			&cli.StringSliceFlag{Name: "fault", Usage: "fault rule, repeatable: drop-every=N, delay=D, throttle-every=N, disconnect-after=N, reject-every=N"},
			&cli.BoolFlag{Name: "hex-ids", Usage: "issue message ids in hex"},
			&cli.StringFlag{Name: "receipt-ids", Value: "as-is", Usage: "how receipts write message ids, `FORMAT`: as-is (as the submit_sm_resp did), hex or dec; an upstream's receipt_id_format"},
			&cli.BoolFlag{Name: "receipt-text-only", Usage: "leave receipted_message_id and message_state out of receipts: the id is only in the text's id: field"},
			&cli.DurationFlag{Name: "receipt-retry", Value: 30 * time.Second, Usage: "resend a receipt the client did not accept (no receiver bound, an error status, no answer) every 100ms for this `DURATION`; 0 = send once"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := simConfig(c)
			if err != nil {
				return err
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			s, err := sim.Start(c.String("listen"), cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			stats := "off"
			if a := c.String("stats"); a != "" {
				ln, err := net.Listen("tcp", a)
				if err != nil {
					return fmt.Errorf("sim: stats: %w", err)
				}
				srv := &http.Server{Handler: simStatsHandler(s), ReadHeaderTimeout: 5 * time.Second}
				go func() { _ = srv.Serve(ln) }()
				defer srv.Close()
				stats = "http://" + ln.Addr().String() + "/stats"
			}
			fmt.Fprintf(c.App.Writer, "SMSC simulator: SMPP on %s, stats on %s\n", s.Addr(), stats)
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
			<-sig
			return nil
		},
	}
}

// simStatsHandler serves GET /stats: submits in total and per key, the
// keys received more than once, receipt deliveries. ?per_key=0 leaves
// the per-key counts out (a long run has millions).
func simStatsHandler(s *sim.Simulator) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		tries, ok := s.Receipts()
		out := map[string]any{
			"total": s.Total(), "duplicates": s.Duplicates(),
			"receipts": map[string]int{"attempts": tries, "accepted": ok},
		}
		if r.URL.Query().Get("per_key") != "0" {
			out["per_key"] = s.Counts()
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	return mux
}

// simConfig is the simulator configuration the flags of c describe.
func simConfig(c *cli.Context) (sim.Config, error) {
	fault, err := parseFaults(c.StringSlice("fault"))
	if err != nil {
		return sim.Config{}, err
	}
	cfg := sim.Config{
		SystemID: c.String("system-id"), Password: c.String("password"),
		DLRDelay: c.Duration("dlr-delay"), HexIDs: c.Bool("hex-ids"), Fault: fault,
		ReceiptTextOnly: c.Bool("receipt-text-only"), ReceiptRetry: c.Duration("receipt-retry"),
	}
	switch f := c.String("receipt-ids"); f {
	case "as-is", "":
	case "hex", "dec":
		cfg.ReceiptIDs = f
	default:
		return sim.Config{}, fmt.Errorf("sim: --receipt-ids must be one of as-is, hex, dec (got %q)", f)
	}
	if cfg.ReceiptRetry <= 0 {
		cfg.ReceiptRetry = -1 // sim: negative = never resend (0 would be its 30s default)
	}
	return cfg, nil
}

// parseFaults turns --fault rules into a sim fault hook.
func parseFaults(rules []string) (func(sim.Call) sim.Action, error) {
	var dropEvery, throttleEvery, rejectEvery, disconnectAfter int64
	var delay time.Duration
	for _, r := range rules {
		k, v, ok := strings.Cut(r, "=")
		if !ok {
			return nil, fmt.Errorf("sim: fault %q: want name=value", r)
		}
		var err error
		switch k {
		case "drop-every":
			_, err = fmt.Sscan(v, &dropEvery)
		case "throttle-every":
			_, err = fmt.Sscan(v, &throttleEvery)
		case "reject-every":
			_, err = fmt.Sscan(v, &rejectEvery)
		case "disconnect-after":
			_, err = fmt.Sscan(v, &disconnectAfter)
		case "delay":
			delay, err = time.ParseDuration(v)
		default:
			return nil, fmt.Errorf("sim: unknown fault %q", k)
		}
		if err != nil {
			return nil, fmt.Errorf("sim: fault %q: %v", r, err)
		}
	}
	if len(rules) == 0 {
		return nil, nil
	}
	return func(c sim.Call) sim.Action {
		a := sim.Action{Delay: delay}
		switch {
		case disconnectAfter > 0 && c.N == disconnectAfter:
			a.Disconnect = true
		case dropEvery > 0 && c.N%dropEvery == 0:
			a.Drop = true
		case throttleEvery > 0 && c.N%throttleEvery == 0:
			a.Status = smpp.StatusThrottled
		case rejectEvery > 0 && c.N%rejectEvery == 0:
			a.Status = smpp.StatusInvDstAdr
		}
		return a
	}, nil
}
