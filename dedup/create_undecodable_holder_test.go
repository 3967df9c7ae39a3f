package dedup

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/pgstore"
	"github.com/smppproxy/smppproxy/smpp"
)

// On the shared store a key the instance does not remember is created
// without a read (CreateFirst); when the record holding it cannot be
// decoded, that Create fails alone: the submit is answered ESME_RSYSERR
// and nothing is written upstream, its retry neither. The engine sees
// that what holds the key is unreadable (state.ErrCorrupt), so it has
// nothing of its own to release and starts no background retry of a
// release that would fail the same way.
func TestACreateOverAnUndecodableHolderAnswersSysErrAndForwardsNothing(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "dedup_undecodable_")
	st, err := pgstore.Open(ctx, pgstore.Options{DSN: dsn, Schema: schema, Migrate: true, InstanceID: "test", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c, cctx := connect(t, dsn)
	if _, err := c.Exec(cctx, `INSERT INTO `+schema+`.records (account, key, segment, state, owner_instance, expires_ns, upstream, seq, body, history, wseq)
		VALUES ('shop', 'k:k', '', 'accepted', 'x', 9223372036854775807, 'up', 0, '\x09', '{}', 0)`); err != nil {
		t.Fatal(err)
	}
	f := &fakeForwarder{}
	logs := testkit.NewLogLines()
	e := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "test", CreateFirst: true, Logger: slog.New(logs)})
	for i := range 2 {
		got := e.Submit(ctx, "shop", Policy{}, submit(t, "k", "t"))
		f.mu.Lock()
		calls, sent := f.calls, f.sent
		f.mu.Unlock()
		if got.Status != smpp.StatusSysErr || got.Outcome != OutStoreErr || sent != 0 {
			t.Errorf("submit %d over an undecodable holder = {%v %s}, written upstream %d; want ESME_RSYSERR store_error, 0", i, got.Status, got.Outcome, sent)
		}
		if calls != i+1 {
			t.Errorf("submit %d: %d journal attempts; want %d (the key is created, not read, first)", i, calls, i+1)
		}
	}
	if n, _ := logs.Count(msgUnreadable); n != 2 {
		t.Errorf("%d submits logged that the key's record cannot be read and nothing is released; want 2 (no background release)", n)
	}
}

func connect(t *testing.T, dsn string) (*pgx.Conn, context.Context) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	t.Cleanup(cancel)
	c, err := pgx.Connect(cctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c, cctx
}
