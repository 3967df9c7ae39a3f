package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/pgstore"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppserver"
	"github.com/smppproxy/smppproxy/state"
)

// leaser is a store shared by several instances: it holds a lease that
// says this instance is alive (pgstore.Store).
type leaser interface{ Lease() bool }

// ownerLeases is st's state.OwnerLeases (a shared store), or nil. The
// engine gets it apart from its store, which the metrics wrap.
func ownerLeases(st state.Store) state.OwnerLeases {
	l, _ := st.(state.OwnerLeases)
	return l
}

// leaseOf is st's Lease (a shared store), or nil.
func leaseOf(st state.Store) func() bool {
	if l, ok := st.(leaser); ok {
		return l.Lease
	}
	return nil
}

// readIsRoundTrip reports whether reading a record of st costs a round
// trip to a database, as much as the create that would find it: the
// engine then forwards a key it does not remember without reading it
// first (dedup.Config.CreateFirst).
func readIsRoundTrip(st state.Store) bool {
	_, ok := st.(*pgstore.Store)
	return ok
}

// openPostgres opens the shared store of cfg as instance id.
func openPostgres(cfg *config.Config, id string, log *slog.Logger) (*pgstore.Store, error) {
	dsn, err := PostgresDSN(cfg.Store)
	if err != nil {
		return nil, err
	}
	st, err := pgstore.Open(context.Background(), pgstore.Options{
		DSN: dsn, Schema: cfg.Store.Schema, InstanceID: id,
		Lease: cfg.Store.Lease.Std(), MaxConns: int32(cfg.Store.MaxConns),
		Migrate: cfg.Store.Migrate != config.MigrateOff, Logger: log.With("component", "store"),
	})
	if err != nil {
		return nil, fmt.Errorf("proxy: open the PostgreSQL store: %w", err)
	}
	return st, nil
}

// PostgresDSN is store.dsn, or the content of store.dsn_file.
func PostgresDSN(s config.Store) (string, error) {
	if s.DSNFile == "" {
		return s.DSN, nil
	}
	b, err := os.ReadFile(s.DSNFile)
	if err != nil {
		return "", fmt.Errorf("proxy: store.dsn_file: %w", err)
	}
	dsn := strings.TrimSpace(string(b))
	if dsn == "" {
		return "", fmt.Errorf("proxy: store.dsn_file %s is empty", s.DSNFile)
	}
	return dsn, nil
}

// sessionInstance is the instance part of this run's upstream session ids
// (the journal's key with sequence numbers): instance, made unique to the
// run when it is store.instance_id, which every run of the instance
// shares (the default is drawn at random for each run already), so that
// a (session, sequence) pair of a record's history never names two runs.
func sessionInstance(cfg *config.Config, instance string) string {
	if cfg.Store.InstanceID == "" || instance != cfg.Store.InstanceID {
		return instance
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return instance + "." + hex.EncodeToString(b[:])
}

// InstanceID returns store.instance_id, or the host name with a random
// suffix: unique among running instances, and without "/" (record owners
// are "instance/n").
func InstanceID(cfg *config.Config) string {
	if id := cfg.Store.InstanceID; id != "" {
		return id
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "smppproxy"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return strings.ReplaceAll(host, "/", "-") + "-" + hex.EncodeToString(b[:])
}

// recover makes the records left sent by the previous run of a store of
// this instance alone unknown. A shared store does that itself for the
// instances whose lease expired; recovering here would take the live
// instances' records for dead.
func (a *App) recover() error {
	if _, shared := a.store.(leaser); shared {
		return nil
	}
	n, err := a.engine.Recover(context.Background())
	if err != nil {
		return fmt.Errorf("proxy: recover: %w", err)
	}
	if n > 0 {
		a.log.Warn("records left in flight by the previous run are now unknown", "count", n)
	}
	return nil
}

// leaseGuard is the link of the request chain that answers every submit
// ESME_RSYSERR while this instance holds no lease on a shared store (a
// database partition, a failover): the other instances may take its
// records for dead, so it must not forward anything until it holds one
// again. With a store of its own it passes everything on.
func (a *App) leaseGuard() smppserver.Middleware {
	l, shared := a.store.(leaser)
	return func(next smppserver.Handler) smppserver.Handler {
		if !shared {
			return next
		}
		return smppserver.HandlerFunc(func(ctx context.Context, w smppserver.ResponseWriter, r *smppserver.Request) {
			if r.Header.ID == smpp.CmdSubmitSM && !l.Lease() {
				_ = w.WriteStatus(smpp.StatusSysErr)
				return
			}
			next.ServeSMPP(ctx, w, r)
		})
	}
}
