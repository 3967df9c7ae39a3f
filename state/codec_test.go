package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func codecSample() *Record {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	return &Record{
		Key:                Key{Account: "acme", Key: "k\x00\x01\xff", Segment: "1/2"},
		Fingerprint:        [32]byte{1, 2, 3, 31: 0xff},
		State:              Unknown,
		Owner:              "owner",
		Upstream:           "smsc",
		Session:            "smsc/1",
		Sequence:           1<<32 - 1,
		MessageID:          "abc",
		NormID:             "2748",
		ProxyID:            "p-1",
		AddrHash:           [16]byte{0, 1, 15: 0xee},
		Delivery:           DeliveryDelivered,
		DeliveryAt:         t0.Add(time.Second),
		Status:             0xC4,
		Attempts:           -3,
		Created:            time.Date(1969, 7, 20, 20, 17, 40, 999999999, time.UTC),
		Updated:            t0,
		Resends:            2,
		FingerprintVersion: FingerprintHMAC,
		History: []Event{
			{At: t0, State: Sent, Session: "smsc/1", Sequence: 9, Note: "n"},
			{State: Unknown, Status: 8, MessageID: "x"},
		},
	}
}

func TestRecordCodecRoundTrip(t *testing.T) {
	for _, want := range []*Record{codecSample(), {}} {
		b := encodeRecord(nil, want)
		got, err := decodeRecord(b)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("decodeRecord(encodeRecord(%+v)) = %+v, %v", want, got, err)
		}
	}
}

func TestRecordCodecTimes(t *testing.T) {
	local := time.Date(2026, 5, 6, 7, 8, 9, 10, time.FixedZone("X", 3600))
	r := &Record{Created: local, Updated: time.Now()}
	got, err := decodeRecord(encodeRecord(nil, r))
	if err != nil || !got.Created.Equal(local) || got.Created.Location() != time.UTC || !got.Updated.Equal(r.Updated) {
		t.Errorf("decodeRecord(encodeRecord(%v, %v)) = %v, %v, %v; want the same instants in UTC",
			r.Created, r.Updated, got.Created, got.Updated, err)
	}
}

func TestRecordCodecRejectsDamage(t *testing.T) {
	b := encodeRecord(nil, codecSample())
	for n := range len(b) {
		if r, err := decodeRecord(b[:n]); !errors.Is(err, errCorrupt) {
			t.Errorf("decodeRecord(first %d of %d bytes) = %+v, %v; want errCorrupt", n, len(b), r, err)
		}
	}
	if r, err := decodeRecord(append(b, 0)); !errors.Is(err, errCorrupt) {
		t.Errorf("decodeRecord(trailing byte) = %+v, %v; want errCorrupt", r, err)
	}
	v6 := append([]byte{6}, b[1:]...)
	if r, err := decodeRecord(v6); !errors.Is(err, errCorrupt) {
		t.Errorf("decodeRecord(version 6) = %+v, %v; want errCorrupt", r, err)
	}
	hot := encodeHot(nil, codecSample(), 3)
	for n := range len(hot) {
		if r, err := decodeRecord(hot[:n]); !errors.Is(err, errCorrupt) {
			t.Errorf("decodeRecord(first %d of %d bytes of version 4) = %+v, %v; want errCorrupt", n, len(hot), r, err)
		}
	}
	if r, err := decodeRecord(append(hot, 0)); !errors.Is(err, errCorrupt) {
		t.Errorf("decodeRecord(version 4, trailing byte) = %+v, %v; want errCorrupt", r, err)
	}
	ev := encodeEvent(nil, &codecSample().History[0])
	for n := range len(ev) {
		if e, err := decodeEvent(ev[:n]); !errors.Is(err, errCorrupt) {
			t.Errorf("decodeEvent(first %d of %d bytes) = %+v, %v; want errCorrupt", n, len(ev), e, err)
		}
	}
}

// Versions 4 and 5 keep every field, with the number of events logged,
// and the events kept with the record: version 4 the first one only (the
// others are kept apart), version 5 those it is given; states and
// delivery states outside the known ones survive too.
func TestRecordCodecVersions4And5(t *testing.T) {
	odd := codecSample()
	odd.State, odd.Delivery, odd.AddrHash = "weird", "later", [16]byte{}
	for _, want := range []*Record{codecSample(), odd, {}} {
		for _, version := range []byte{recordVersion4, recordVersion5} {
			b := encodeHotVersion(nil, want, 70, version)
			got, n, hot, err := decodeStored(b)
			w := want.Clone()
			if version == recordVersion4 {
				w.History = w.History[:min(len(w.History), 1)]
			}
			if len(w.History) == 0 {
				w.History = nil
			}
			if err != nil || !hot || n != 70 || !reflect.DeepEqual(got, w) {
				t.Errorf("decodeStored(version %d of %+v) = %+v, %d, %v, %v", version, w, got, n, hot, err)
			}
		}
	}
	if len(codecSample().History) < 2 {
		t.Fatal("the sample needs a history of several events")
	}
	v5 := encodeHot(nil, codecSample(), 2)
	for n := range len(v5) {
		if r, _, _, err := decodeStored(v5[:n]); !errors.Is(err, errCorrupt) {
			t.Errorf("decodeStored(first %d of %d bytes of version 5) = %+v, %v; want errCorrupt", n, len(v5), r, err)
		}
	}
	full := codecSample()
	if b, old := encodeHot(nil, full, 2), encodeRecord(nil, full); len(b) >= len(old) {
		t.Errorf("version 5 takes %d bytes, version 3 %d; want smaller", len(b), len(old))
	}
	for _, e := range codecSample().History {
		got, err := decodeEvent(encodeEvent(nil, &e))
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Errorf("decodeEvent(encodeEvent(%+v)) = %+v, %v", e, got, err)
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(nil, codecSample()))
	f.Add(encodeRecord(nil, &Record{}))
	f.Add([]byte{1})
	f.Add(encodeHot(nil, codecSample(), 5))
	f.Add(encodeHot(nil, &Record{State: "x", Delivery: "y"}, 0))
	f.Add(encodeHotVersion(nil, codecSample(), 5, recordVersion4))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, exp, peeked, perr := peekStateExpires(b)
		r, n, hot, err := decodeStored(b)
		if err != nil {
			return
		}
		// What a count by state reads of a record is what decoding it gives.
		if hot && (!peeked || perr != nil || st != r.State || !exp.Equal(r.Expires)) {
			t.Fatalf("peekStateExpires(%x) = %q, %v, %v, %v; decodeStored gives %q, %v", b, st, exp, peeked, perr, r.State, r.Expires)
		}
		if !hot && peeked {
			t.Fatalf("peekStateExpires read a version %d record; want it left to decodeStored", b[0])
		}
		if hot {
			again := encodeHot(nil, r, n)
			r2, n2, _, err := decodeStored(again)
			if err != nil || n2 != n || !reflect.DeepEqual(r, r2) {
				t.Fatalf("re-decoding %x = %+v, %d, %v; want %+v, %d", again, r2, n2, err, r, n)
			}
			if !bytes.Equal(encodeHot(nil, r2, n2), again) {
				t.Fatalf("version 5 encoding is not stable for %+v", r)
			}
			return
		}
		again := encodeRecord(nil, r)
		r2, err := decodeRecord(again)
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("re-decoding %x = %+v, %v; want %+v", again, r2, err, r)
		}
		if !bytes.Equal(encodeRecord(nil, r2), again) {
			t.Fatalf("encoding is not stable for %+v", r)
		}
	})
}

func FuzzDecodeEvent(f *testing.F) {
	for _, e := range codecSample().History {
		f.Add(encodeEvent(nil, &e))
	}
	f.Add([]byte{eventVersion1})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEvent(b)
		if err != nil {
			return
		}
		again := encodeEvent(nil, &e)
		e2, err := decodeEvent(again)
		if err != nil || !reflect.DeepEqual(e, e2) || !bytes.Equal(encodeEvent(nil, &e2), again) {
			t.Fatalf("re-decoding %x = %+v, %v; want %+v (stable)", again, e2, err, e)
		}
	})
}

func TestKeyEscaping(t *testing.T) {
	tests := []struct {
		k    Key
		want string
	}{
		{Key{"a", "b", ""}, "r/a\x00b\x00"},
		{Key{"a", "b\x00c", "1/2"}, "r/a\x00b\x01\x01c\x001/2"},
		{Key{"a\x01", "", ""}, "r/a\x01\x02\x00\x00"},
	}
	for _, tc := range tests {
		if got := string(recordKey(tc.k)); got != tc.want {
			t.Errorf("recordKey(%q) = %q, want %q", tc.k, got, tc.want)
		}
	}
	if got, want := string(messageKey("u", "m")), "m/u\x00m"; got != want {
		t.Errorf("messageKey = %q, want %q", got, want)
	}
}

// The binary codec against encoding/json on a typical record: the
// committer decodes and encodes on its single goroutine.
func BenchmarkRecordCodec(b *testing.B) {
	r := codecSample()
	r.History = r.History[:1]
	bin := encodeRecord(nil, r)
	js, _ := json.Marshal(r)
	b.Logf("sizes: binary %d bytes, json %d bytes", len(bin), len(js))
	b.Run("binary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeRecord(encodeRecord(nil, r)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v, _ := json.Marshal(r)
			var got Record
			if err := json.Unmarshal(v, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A record written by a version-1 store (before receipts) still decodes.
func TestRecordCodecReadsVersion1(t *testing.T) {
	want := codecSample()
	want.NormID, want.ProxyID, want.AddrHash, want.Delivery, want.DeliveryAt = "", "", [16]byte{}, "", time.Time{}
	want.Resends, want.FingerprintVersion = 0, FingerprintSHA256
	v1 := encodeRecordVersion(nil, want, recordVersion1)
	if !bytes.Equal(encodeRecordVersion(nil, &Record{}, recordVersion1), encodeRecordV1Empty()) {
		t.Fatalf("encodeRecordVersion(1) does not write the version-1 layout")
	}
	got, err := decodeRecord(v1)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("decodeRecord(version 1) = %+v, %v; want %+v", got, err, want)
	}
}

// A record written by a version-2 store decodes with an unsalted
// fingerprint and with the resend its history noted counted, once; the
// count survives the history losing that event later.
func TestRecordCodecUpgradesVersion2(t *testing.T) {
	old := codecSample()
	old.Resends, old.FingerprintVersion = 0, 0
	old.History = append(old.History, Event{State: Sent, Note: LegacyResendNote})
	got, err := decodeRecord(encodeRecordVersion(nil, old, recordVersion2))
	if err != nil {
		t.Fatal(err)
	}
	if got.Resends != 1 || got.FingerprintVersion != FingerprintSHA256 {
		t.Errorf("version-2 record decodes with resends %d, fingerprint version %d; want 1, %d", got.Resends, got.FingerprintVersion, FingerprintSHA256)
	}
	got.History = got.History[:1]
	again, err := decodeRecord(encodeRecord(nil, got))
	if err != nil || again.Resends != 1 {
		t.Errorf("re-encoded record: resends %v, %v; want 1", again, err)
	}
}

// encodeRecordV1Empty is the version-1 encoding of an empty record.
func encodeRecordV1Empty() []byte {
	return []byte{recordVersion1, 0, 0, 0, // key
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // fingerprint
		0, 0, 0, 0, // state, owner, upstream, session
		0, 0, 0, 0, // sequence, message id, status, attempts
		0, 0, 0, // times
		0, // history
	}
}

func TestQueueEntryCodec(t *testing.T) {
	for _, want := range []*QueueEntry{
		{Queue: "shop\x00", Seq: 1 << 40, DedupKey: "smsc\x00123\x00delivered", Kind: "receipt", Upstream: "smsc",
			MessageID: "123", Stat: "DELIVRD", Command: 5, Body: []byte{0, 1, 2},
			Enqueued: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Expires: time.Date(2026, 1, 5, 3, 4, 5, 6, time.UTC)},
		{},
	} {
		b := encodeEntry(nil, want)
		got, err := decodeEntry(b)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("decodeEntry(encodeEntry(%+v)) = %+v, %v", want, got, err)
		}
		for n := range len(b) {
			if _, err := decodeEntry(b[:n]); !errors.Is(err, errCorrupt) {
				t.Errorf("decodeEntry(first %d of %d bytes) = %v; want errCorrupt", n, len(b), err)
			}
		}
	}
}

// hotSize and eventSize are enough for the encodings they size, so that
// encoding a record allocates once.
func TestEncodingSizesAreEnough(t *testing.T) {
	for _, r := range []*Record{codecSample(), {}, {Key: Key{Account: "a", Key: strings.Repeat("k", 300)}}} {
		if b := encodeHot(nil, r, 70); len(b) > hotSize(r) {
			t.Errorf("encodeHot of %+v takes %d bytes; hotSize says %d", r, len(b), hotSize(r))
		}
		for i := range r.History {
			if b := encodeEvent(nil, &r.History[i]); len(b) > eventSize(&r.History[i]) {
				t.Errorf("encodeEvent of %+v takes %d bytes; eventSize says %d", r.History[i], len(b), eventSize(&r.History[i]))
			}
		}
	}
}

// FuzzDecodeQueueEntry: no input panics either decoder of queue entries;
// what a count of queue depths reads of an entry (its queue and expiry)
// is what decoding it gives, and it refuses what decoding refuses; a
// decoded entry encodes back to what decodes the same.
func FuzzDecodeQueueEntry(f *testing.F) {
	f.Add(encodeEntry(nil, &QueueEntry{Queue: "shop\x00", Seq: 1 << 40, DedupKey: "smsc\x00123", Kind: "receipt", Upstream: "smsc",
		MessageID: "123", Stat: "DELIVRD", Command: 5, Body: []byte{0, 1, 2},
		Enqueued: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Expires: time.Date(2026, 1, 5, 3, 4, 5, 6, time.UTC)}))
	f.Add(encodeEntry(nil, &QueueEntry{}))
	f.Add([]byte{entryVersion1})
	f.Fuzz(func(t *testing.T, b []byte) {
		q, exp, perr := peekQueueExpires(b)
		e, err := decodeEntry(b)
		if (err == nil) != (perr == nil) {
			t.Fatalf("decodeEntry(%x) = %v but peekQueueExpires = %v", b, err, perr)
		}
		if err != nil {
			return
		}
		if string(q) != e.Queue || !exp.Equal(e.Expires) {
			t.Fatalf("peekQueueExpires(%x) = %q, %v; decodeEntry gives %q, %v", b, q, exp, e.Queue, e.Expires)
		}
		again, err := decodeEntry(encodeEntry(nil, e))
		if err != nil || !reflect.DeepEqual(again, e) {
			t.Fatalf("re-decoding %+v = %+v, %v", e, again, err)
		}
	})
}
