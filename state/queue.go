package state

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/smppproxy/smppproxy/internal/varcodec"
	"time"
)

// Queue is the durable store of deliver_sm PDUs waiting for an ESME
// (receipts and MO, SPEC §4): named FIFO queues, one per account, plus any
// other queue a caller names (the receipt service keeps unmatched receipts
// in queues of their own). All methods are safe for concurrent use; a
// method that returns nil error has made its effect durable.
//
// An entry's Body is the PDU body to deliver. For a receipt that is the
// receipt text; for MO it is the subscriber's message, which the store
// therefore holds until the entry is acknowledged (Ack deletes it) or
// expires. Nothing else in the store ever holds message content.
type Queue interface {
	// Enqueue durably appends e to queue e.Queue and returns the sequence
	// number it was given (strictly increasing in enqueue order across the
	// store, so List returns a queue in enqueue order). When e.DedupKey is
	// set and an entry with the same DedupKey was enqueued into the same
	// queue before and its marker has not expired (it lives until the
	// entry's Expires, even after Ack), nothing is written and Enqueue
	// returns that entry's sequence number with dup=true. e is not
	// modified.
	Enqueue(ctx context.Context, e *QueueEntry) (seq uint64, dup bool, err error)

	// List returns up to limit live (unexpired, unacknowledged) entries of
	// queue whose sequence number is greater than after, in sequence order.
	List(ctx context.Context, queue string, after uint64, limit int) ([]*QueueEntry, error)

	// Ack deletes entry seq of queue. Its dedup marker stays until it
	// expires. Acknowledging an entry that is not there is not an error.
	Ack(ctx context.Context, queue string, seq uint64) error

	// Depths returns the number of live entries of every non-empty queue:
	// an entry counts from when the write that put it is durable until the
	// one that deletes it is (an Ack in flight still counts it).
	Depths(ctx context.Context) (map[string]int, error)
}

// Claimer is implemented by a Queue that several processes deliver from
// (a store shared by several proxy instances): a process claims an entry
// before delivering it, so that no two deliver it at once.
type Claimer interface {
	// Claim makes the entries seqs of queue owner's to deliver until
	// until, and returns those it claimed, in order: not an entry whose
	// claim by another owner has not run out. Claiming again extends
	// one's own claim; an entry that is gone is not claimed. A store may
	// keep until as its distance from the caller's clock now, counted on
	// a clock of its own that every owner shares (PostgreSQL's).
	Claim(ctx context.Context, queue string, seqs []uint64, owner string, until time.Time) ([]uint64, error)

	// ListClaimable is Queue.List less the entries on which another
	// owner's claim has not run out: those owner could not claim. A
	// process that lists with it does not keep trying to claim what
	// another process is delivering.
	ListClaimable(ctx context.Context, queue string, after uint64, limit int, owner string) ([]*QueueEntry, error)
}

// Notifier is implemented by a Queue shared by several processes that can
// tell a process when another one enqueued: Subscribe's fn is called with
// the queue's name soon after. Notifications can be lost (a connection
// down): subscribers keep polling as a fallback.
type Notifier interface {
	Subscribe(fn func(queue string))
}

// QueueEntry is one queued PDU.
type QueueEntry struct {
	// Queue names the queue: an account's system_id for delivery queues.
	Queue string `json:"queue"`
	// Seq is assigned by Enqueue.
	Seq uint64 `json:"seq"`
	// DedupKey, when set, makes a second Enqueue of the same key into the
	// same queue a no-op (see Queue.Enqueue).
	DedupKey string `json:"dedup_key,omitempty"`
	// Kind, Upstream, MessageID and Stat describe the entry for
	// inspection (what it is, where it came from, which message it is
	// about, what the receipt said); the store does not interpret them.
	Kind      string `json:"kind,omitempty"`
	Upstream  string `json:"upstream,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	Stat      string `json:"stat,omitempty"`
	// Command is the command id to deliver the body with (deliver_sm or
	// data_sm).
	Command uint32 `json:"command"`
	// Body is the PDU body (everything after the header). It is message
	// content for MO: never log it.
	Body []byte `json:"-"`
	// Enqueued is when the entry was enqueued; Expires is when it (and its
	// dedup marker) stops being live. A zero Expires never expires.
	Enqueued time.Time `json:"enqueued"`
	Expires  time.Time `json:"expires"`
}

// Expired reports whether the entry is past Expires at now.
func (e *QueueEntry) Expired(now time.Time) bool {
	return expiredAt(e.Expires, now)
}

// errNilEntry is returned by Enqueue(ctx, nil).
var errNilEntry = errors.New("state: Enqueue of a nil entry")

// Queue entry encoding (same primitives as records):
//
//	byte    version (1)
//	str     Queue
//	uvarint Seq
//	str     DedupKey, str Kind, str Upstream, str MessageID, str Stat
//	uvarint Command
//	str     Body
//	time    Enqueued, time Expires
//
// A dedup marker is: uvarint Seq, time Expires.
const entryVersion1 = 1

func encodeEntry(dst []byte, e *QueueEntry) []byte {
	dst = append(dst, entryVersion1)
	dst = varcodec.AppendString(dst, e.Queue)
	dst = binary.AppendUvarint(dst, e.Seq)
	dst = varcodec.AppendString(dst, e.DedupKey)
	dst = varcodec.AppendString(dst, e.Kind)
	dst = varcodec.AppendString(dst, e.Upstream)
	dst = varcodec.AppendString(dst, e.MessageID)
	dst = varcodec.AppendString(dst, e.Stat)
	dst = binary.AppendUvarint(dst, uint64(e.Command))
	dst = varcodec.AppendString(dst, string(e.Body))
	dst = varcodec.AppendTime(dst, e.Enqueued)
	return varcodec.AppendTime(dst, e.Expires)
}

func decodeEntry(b []byte) (*QueueEntry, error) {
	if len(b) == 0 || b[0] != entryVersion1 {
		return nil, fmt.Errorf("%w: queue entry: bad version", errCorrupt)
	}
	d := varcodec.Sharing(b[1:], errCorrupt)
	e := &QueueEntry{}
	e.Queue = d.Str()
	e.Seq = d.Uvarint()
	e.DedupKey = d.Str()
	e.Kind = d.Str()
	e.Upstream = d.Str()
	e.MessageID = d.Str()
	e.Stat = d.Str()
	e.Command = d.U32()
	if body := d.Str(); body != "" {
		e.Body = []byte(body)
	}
	e.Enqueued = d.Time()
	e.Expires = d.Time()
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("%d trailing bytes", len(d.B))
	}
	if d.Err != nil {
		return nil, d.Err
	}
	return e, nil
}

// peekQueueExpires reads the queue and the expiry of an encoded queue
// entry and nothing else (queue aliases b): what a count of queue depths
// needs. It refuses what decodeEntry refuses (a fuzz test holds the two
// together).
func peekQueueExpires(b []byte) (queue []byte, expires time.Time, err error) {
	if len(b) == 0 || b[0] != entryVersion1 {
		return nil, time.Time{}, fmt.Errorf("%w: queue entry: bad version", errCorrupt)
	}
	d := varcodec.Decoder{Corrupt: errCorrupt, B: b[1:]}
	queue = d.StrBytes()
	d.Uvarint() // sequence number
	d.SkipStr() // dedup key
	d.SkipStr() // kind
	d.SkipStr() // upstream
	d.SkipStr() // message id
	d.SkipStr() // stat
	d.U32()     // command
	d.SkipStr() // body
	d.Time()    // enqueued
	expires = d.Time()
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("%d trailing bytes", len(d.B))
	}
	if d.Err != nil {
		return nil, time.Time{}, d.Err
	}
	return queue, expires, nil
}

type dedupMarker struct {
	seq     uint64
	expires time.Time
}

func encodeMarker(seq uint64, expires time.Time) []byte {
	return varcodec.AppendTime(binary.AppendUvarint(nil, seq), expires)
}

func decodeMarker(b []byte) (dedupMarker, error) {
	d := varcodec.Decoder{Corrupt: errCorrupt, B: b}
	m := dedupMarker{seq: d.Uvarint(), expires: d.Time()}
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("marker: %d trailing bytes", len(d.B))
	}
	return m, d.Err
}

func (m dedupMarker) live(now time.Time) bool {
	return !expiredAt(m.expires, now)
}

// queuePrefix is the common prefix of the entries of queue.
func queuePrefix(queue string) []byte {
	b := make([]byte, 0, len(prefixQueue)+len(queue)+9)
	b = append(b, prefixQueue...)
	b = appendEscaped(b, queue)
	return append(b, 0)
}

func entryKey(queue string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(queuePrefix(queue), seq)
}

// splitEntryKey returns the queue prefix and the sequence number of k, an
// entryKey.
func splitEntryKey(k []byte) (prefix []byte, seq uint64) {
	return k[:len(k)-8], binary.BigEndian.Uint64(k[len(k)-8:])
}

func dedupKey(queue, key string) []byte {
	b := make([]byte, 0, len(prefixDedup)+len(queue)+len(key)+1)
	b = append(b, prefixDedup...)
	b = appendEscaped(b, queue)
	b = append(b, 0)
	return appendEscaped(b, key)
}

// cloneEntry copies e for storing, with seq.
func cloneEntry(e *QueueEntry, seq uint64) *QueueEntry {
	c := *e
	c.Seq = seq
	c.Body = append([]byte(nil), e.Body...)
	return &c
}
