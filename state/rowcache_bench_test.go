package state

import (
	"fmt"
	"testing"
)

// BenchmarkRowCache is the committer's part of the row cache per write of
// a submit (a record key and a message-id entry, batches of 128 submits
// over 100,000 keys, so that the cache is full and evicts), and a read
// back of each.
//
//	go test -run x -bench RowCache ./state/
func BenchmarkRowCache(b *testing.B) {
	const keys = 100_000
	reqs := make([]*request, keys)
	for i := range reqs {
		rk := recordKey(Key{Account: "shop", Key: fmt.Sprintf("otp-%012d", i)})
		reqs[i] = &request{writes: []write{
			{key: rk, val: make([]byte, 120)},
			{key: []byte(fmt.Sprintf("%s%s/%016x", prefixMessage, "smsc", i)), val: rk},
		}}
	}
	c := newRowCache(rowCacheKeys)
	b.ResetTimer()
	for n := 0; n < b.N; {
		for i := 0; i+128 <= keys && n < b.N; i += 128 {
			c.add(reqs[i:i+128], nil)
			for _, r := range reqs[i : i+128] {
				if _, ok := c.get(r.writes[0].key); !ok {
					b.Fatal("a key just added is not cached")
				}
			}
			n += 128
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/write")
}
