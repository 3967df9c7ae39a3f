package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

var (
	byteaCases = map[string][][]byte{
		"empty":             {},
		"one":               {[]byte("x")},
		"a NULL among them": {[]byte("a"), nil, []byte("\x00\xff")},
		"an empty value":    {{}, []byte("b")},
		"only NULLs":        {nil, nil},
	}
	int8Cases = map[string][]int64{
		"empty":     {},
		"mixed":     {0, 1, -1, 1 << 40, -(1 << 62)},
		"one large": {9223372036854775807},
	}
)

// The batch statements' columns are encoded by the store, not by pgx: the
// bytes must be those pgx writes for the same slice, NULLs and empty
// arrays included, or the server reads other values.
func TestEncodedArraysAreThoseOfPgx(t *testing.T) {
	m := pgtype.NewMap()
	for name, a := range byteaCases {
		want, err := m.Encode(pgtype.ByteaArrayOID, pgtype.BinaryFormatCode, a, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := byteaArray(a).b; !bytes.Equal(got, want) {
			t.Errorf("bytea[] %s: % x, pgx writes % x", name, got, want)
		}
	}
	for name, a := range int8Cases {
		want, err := m.Encode(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, a, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := int8Array(a).b; !bytes.Equal(got, want) {
			t.Errorf("int8[] %s: % x, pgx writes % x", name, got, want)
		}
	}
}

// encodedSize must not be below what pgx writes for an argument: the room
// reserved for a statement and a batch comes from it.
func TestTheRoomReservedHoldsTheArguments(t *testing.T) {
	m := pgtype.NewMap()
	check := func(name string, oid uint32, format int16, v any) {
		t.Helper()
		enc, err := m.Encode(oid, format, v, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n := encodedSize(v); n < len(enc) {
			t.Errorf("%s: encodedSize %d, encoded in %d bytes", name, n, len(enc))
		}
	}
	for name, a := range byteaCases {
		check("bytea[] "+name, pgtype.ByteaArrayOID, pgtype.BinaryFormatCode, a)
	}
	for name, a := range int8Cases {
		check("int8[] "+name, pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, a)
	}
	check("text[]", pgtype.TextArrayOID, pgtype.TextFormatCode, []string{"accepted", "", "sent", "an instance-1 a3f0"})
	check("text[] binary", pgtype.TextArrayOID, pgtype.BinaryFormatCode, []string{"accepted", "", "sent"})
	check("bool[]", pgtype.BoolArrayOID, pgtype.BinaryFormatCode, []bool{true, false, true})

	// A statement's first array asks for the room of all its arguments,
	// and gets it in one step.
	args := []any{byteaArray(byteaCases["a NULL among them"]), []string{"sent", "accepted"}, int8Array(int8Cases["mixed"]), int64(7)}
	room := reserveArgs(args)
	buf, err := rawArrayPlan{}.Encode(args[0], make([]byte, 0, 16))
	if err != nil {
		t.Fatal(err)
	}
	if cap(buf) < room || !bytes.Equal(buf, args[0].(rawValue).raw().b) {
		t.Errorf("first argument: cap %d for a room of %d, bytes % x", cap(buf), room, buf)
	}
	kept := []byte("before")
	grown, err := reserveWrite(4096).Encode(kept)
	if err != nil || string(grown) != "before" || cap(grown)-len(grown) < 4096 {
		t.Errorf("reserveWrite: %q, room %d, %v", grown, cap(grown)-len(grown), err)
	}
}

// Through a connection of the store's pool, the arrays the store encodes
// reach the server as the values they hold, whatever query mode the DSN
// asks pgx for (exec and simple_protocol encode arguments in text, without
// the parameters' types: what runs behind PgBouncer in transaction mode).
func TestEncodedArraysReachTheServerIntact(t *testing.T) {
	dsn := testDSN(t)
	for _, mode := range []string{"", "exec", "simple_protocol", "describe_exec", "cache_describe"} {
		t.Run("mode="+mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			pool, err := newPool(ctx, Options{DSN: withQueryMode(dsn, mode), MaxConns: 2, Schema: "public", InstanceID: "t", Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			for name, a := range byteaCases {
				b := &pgx.Batch{}
				var got [][]byte
				var n int
				queue(b, `SELECT $1::bytea[], cardinality($1::bytea[])`, byteaArray(a)).QueryRow(func(r pgx.Row) error {
					return r.Scan(&got, &n)
				})
				if err := sendBatch(ctx, pool, b); err != nil {
					t.Fatalf("bytea[] %s: %v", name, err)
				}
				if n != len(a) || !slices.EqualFunc(got, a, func(x, y []byte) bool { return (x == nil) == (y == nil) && bytes.Equal(x, y) }) {
					t.Errorf("bytea[] %s: server read %q (%d elements), sent %q", name, got, n, a)
				}
			}
			for name, a := range int8Cases {
				b := &pgx.Batch{}
				var got []int64
				queue(b, `SELECT $1::int8[]`, int8Array(a)).QueryRow(func(r pgx.Row) error { return r.Scan(&got) })
				if err := sendBatch(ctx, pool, b); err != nil {
					t.Fatalf("int8[] %s: %v", name, err)
				}
				if !slices.Equal(got, a) {
					t.Errorf("int8[] %s: server read %v, sent %v", name, got, a)
				}
			}
		})
	}
}

// withQueryMode adds pgx's default_query_exec_mode to a URL DSN ("" leaves
// it as it is).
func withQueryMode(dsn, mode string) string {
	if mode == "" {
		return dsn
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "default_query_exec_mode=" + mode
}

// The store keeps its contract when the DSN makes pgx encode arguments in
// text (simple_protocol): the batch statements' arrays are then encoded
// by pgx from their slices.
func TestConformanceWithTheSimpleProtocol(t *testing.T) {
	dsn := withQueryMode(testDSN(t), "simple_protocol")
	storetest.Run(t, func(t *testing.T, now func() time.Time) state.Store {
		return openTest(t, Options{DSN: dsn, Now: now})
	})
}

// A batch is written into buffers sized for it once: neither pgx's
// argument buffer nor the connection's write buffer is regrown by appends
// (which allocates several times the final size each): a batch shaped like
// the store's (a few statements of many arrays of tens of KiB).
func TestABatchIsWrittenWithoutRegrowingBuffers(t *testing.T) {
	dsn := testDSN(t)
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	pool, err := newPool(ctx, Options{DSN: dsn, MaxConns: 1, Schema: "public", InstanceID: "t", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const statements, arrays, elems, size = 4, 8, 32, 1024
	column := make([][]byte, elems)
	for i := range column {
		column[i] = bytes.Repeat([]byte{byte(i)}, size)
	}
	var terms []string
	for i := 1; i <= arrays; i++ {
		terms = append(terms, fmt.Sprintf("cardinality($%d::bytea[])", i))
	}
	sql := "SELECT " + strings.Join(terms, " + ")
	payload := statements * arrays * elems * size
	run := func() uint64 {
		b := &pgx.Batch{}
		counts := make([]int, statements)
		for i := range statements {
			args := make([]any, arrays)
			for j := range args {
				args[j] = byteaArray(column)
			}
			queue(b, sql, args...).QueryRow(func(r pgx.Row) error { return r.Scan(&counts[i]) })
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := sendBatch(ctx, pool, b); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		for _, n := range counts {
			if n != arrays*elems {
				t.Fatalf("server counted %d elements, sent %d", n, arrays*elems)
			}
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	run() // the statement is prepared on its first batch, which flushes early
	// The arguments are copied into pgx's argument buffer and into the
	// connection's write buffer: twice the payload (2.2 times measured),
	// and a margin for what else the process allocates meanwhile; regrown
	// by appends they took 5.4–6.5 times.
	if got, limit := run(), uint64(payload)*3; got > limit {
		t.Errorf("sending a batch of %d bytes allocated %d bytes, want at most %d", payload, got, limit)
	}
}
