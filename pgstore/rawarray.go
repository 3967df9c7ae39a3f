package pgstore

import (
	"encoding/binary"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
)

// A batch statement's columns are arrays of hundreds of rows. pgx encodes
// an array argument element by element into a buffer it shrinks back to
// 256 bytes after every statement, so each statement regrows it by
// appending; and the connection's write buffer, which holds the whole
// batch, is shrunk back to 1 KiB after every flush and regrown the same
// way. Growing a buffer by appends allocates about three times its final
// size: those regrowths were ~40% of the bytes the proxy allocated per
// submit on this store. So the batch writes encode their bytea[] and
// int8[] columns themselves, once, in PostgreSQL's binary array format
// (rawArray), the first column of a statement asks for room for all of
// them at once, and the batch asks the connection's write buffer for room
// for the whole batch (reserveWrite) before pgx writes it.

// rawArray is an array argument already in PostgreSQL's binary format
// (what array_recv reads), src the slice it encodes: a bytea[]
// (*rawBytea) or an int8[] (*rawInt8). reserve, when set, is how much
// room the statement's arguments need in all: the encoder's buffer is
// grown to it first. Where pgx encodes in text (a DSN's
// default_query_exec_mode exec or simple_protocol, without the
// parameters' types), src is encoded by pgx's own codec instead.
type rawArray struct {
	b       []byte
	reserve int
	src     any
}

func (r *rawArray) raw() *rawArray { return r }

type (
	rawBytea struct{ rawArray }
	rawInt8  struct{ rawArray }
)

// rawValue is a *rawBytea or a *rawInt8.
type rawValue interface{ raw() *rawArray }

// arrayHeader appends the header of a one-dimensional array of n elements
// of type elem (lower bound 1), hasNull saying whether one is NULL.
func arrayHeader(dst []byte, n int, elem uint32, hasNull bool) []byte {
	flags := uint32(0)
	if hasNull {
		flags = 1
	}
	dst = binary.BigEndian.AppendUint32(dst, 1) // dimensions
	dst = binary.BigEndian.AppendUint32(dst, flags)
	dst = binary.BigEndian.AppendUint32(dst, elem)
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	return binary.BigEndian.AppendUint32(dst, 1) // lower bound
}

// byteaArray encodes a as a bytea[], a nil element as NULL.
func byteaArray(a [][]byte) *rawBytea {
	size, hasNull := 20, false
	for _, e := range a {
		size += 4 + len(e)
		hasNull = hasNull || e == nil
	}
	b := arrayHeader(make([]byte, 0, size), len(a), pgtype.ByteaOID, hasNull)
	for _, e := range a {
		if e == nil {
			b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF) // -1: NULL
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return &rawBytea{rawArray{b: b, src: a}}
}

// int8Array encodes a as an int8[].
func int8Array(a []int64) *rawInt8 {
	b := arrayHeader(make([]byte, 0, 20+12*len(a)), len(a), pgtype.Int8OID, false)
	for _, v := range a {
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return &rawInt8{rawArray{b: b, src: a}}
}

// reserveArgs makes the first rawArray of a statement's arguments ask for
// room for all of them (argsSize), and returns that room (0 without a
// rawArray).
func reserveArgs(args []any) int {
	for _, a := range args {
		if r, ok := a.(rawValue); ok {
			r.raw().reserve = argsSize(args)
			return r.raw().reserve
		}
	}
	return 0
}

// argsSize bounds the size of a statement's arguments as a Bind message
// carries them (each with its length and format code).
func argsSize(args []any) int {
	n := 0
	for _, a := range args {
		n += 6 + encodedSize(a)
	}
	return n
}

// encodedSize bounds the size of a's encoding as an argument.
func encodedSize(a any) int {
	switch v := a.(type) {
	case rawValue:
		return len(v.raw().b)
	case []string:
		n := 20
		for _, e := range v {
			n += 4 + len(e)
		}
		return n
	case [][]byte:
		n := 20
		for _, e := range v {
			n += 4 + len(e)
		}
		return n
	case []int64:
		return 20 + 12*len(v)
	case []bool:
		return 20 + 5*len(v)
	case string:
		return len(v)
	case []byte:
		return len(v)
	default:
		return 16
	}
}

// rawArrayCodec is the codec of bytea[] and int8[] that writes a rawArray
// as it is (its source slice when pgx encodes in text) and leaves every
// other value to pgx's own codec.
type rawArrayCodec struct{ pgtype.Codec }

func (c rawArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	r, ok := value.(rawValue)
	switch {
	case !ok:
		return c.Codec.PlanEncode(m, oid, format, value)
	case format == pgtype.BinaryFormatCode:
		return rawArrayPlan{}
	}
	if next := m.PlanEncode(oid, format, r.raw().src); next != nil { // with pgx's wrappers of slices
		return rawSourcePlan{next}
	}
	return nil
}

type rawArrayPlan struct{}

func (rawArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	r := value.(rawValue).raw()
	return append(grow(buf, r.reserve), r.b...), nil
}

// rawSourcePlan encodes a rawArray's source slice with pgx's plan for it.
type rawSourcePlan struct{ next pgtype.EncodePlan }

func (p rawSourcePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(value.(rawValue).raw().src, buf)
}

// registerRawArrays makes the connection's type map encode rawArray
// arguments of bytea[] and int8[] parameters, and know their types where
// the parameters' are not known (text encodings).
func registerRawArrays(m *pgtype.Map) {
	for _, oid := range []uint32{pgtype.ByteaArrayOID, pgtype.Int8ArrayOID} {
		if t, ok := m.TypeForOID(oid); ok {
			m.RegisterType(&pgtype.Type{Name: t.Name, OID: oid, Codec: rawArrayCodec{t.Codec}})
		}
	}
	m.RegisterDefaultPgType(&rawBytea{}, "_bytea")
	m.RegisterDefaultPgType(&rawInt8{}, "_int8")
}

// reserveWrite is a message of no bytes that grows the connection's write
// buffer by n: sent before a batch, the batch's messages are then written
// into one buffer instead of regrowing it.
type reserveWrite int

func (reserveWrite) Frontend()                           {}
func (reserveWrite) Decode(_ []byte) error               { return nil }
func (n reserveWrite) Encode(dst []byte) ([]byte, error) { return grow(dst, int(n)), nil }

var _ pgproto3.FrontendMessage = reserveWrite(0)

// grow returns buf with room for n more bytes, in one allocation of that
// room (slices.Grow allocated twice as much here under the race
// detector, failing the test of a batch's allocations).
func grow(buf []byte, n int) []byte {
	if n <= cap(buf)-len(buf) {
		return buf
	}
	grown := make([]byte, len(buf), len(buf)+n)
	copy(grown, buf)
	return grown
}
