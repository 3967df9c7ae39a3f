package smppclient

// BeforeWrite is a crash-test hook, nil in production. When set, every
// session's writer calls it right before the socket write of a batch, with
// the batch's bytes (not to be kept or changed) and the number of requests
// in it that wait for a response (submits): their records are already
// durable, none of their bytes has left. Set it only before any pool
// starts; it is read without synchronisation.
var BeforeWrite func(batch []byte, submits int)

// waiting is the number of reqs that wait for a response (submits, as
// opposed to control frames).
func waiting(reqs []*writeReq) int {
	n := 0
	for _, req := range reqs {
		if req.done != nil {
			n++
		}
	}
	return n
}
