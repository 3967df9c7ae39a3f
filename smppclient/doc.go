// Package smppclient holds the proxy's binds to one upstream SMSC: a Pool of
// parallel sessions (transceiver, transmitter, or transmitter plus receiver),
// each bound with gosmpp and then driven by this package's own reader and
// writer goroutines, so that the proxy sees and controls what plain gosmpp
// hides: the session identity, the sequence number of every request, and
// the exact bytes written.
//
// A session is a reader and a writer. The writer goroutine alone writes to
// the socket; it drains a bounded queue and sends enquire_link when nothing
// was received for Config.EnquireLink. The reader correlates responses with
// pending requests by sequence number, answers enquire_link, unbind and
// unknown requests, and hands deliver_sm and data_sm to Config.OnDeliver in
// goroutines bounded by Config.DeliverWindow over the pool (receipt intake
// has its own window, apart from the submit window). A session from which nothing arrives for
// three enquire_link periods is closed; every close has one CloseReason.
// Each pool slot rebinds forever with capped exponential back-off and jitter
// until Pool.Close; a session that drops within Config.StableAfter of its
// bind counts as a failed attempt, so the back-off keeps growing for an
// upstream that accepts binds and drops them at once. Per-PDU warnings
// about what the upstream sends are logged at most once per WarnInterval
// per kind, with the count held back.
//
// Pool.Submit is the forwarding primitive of the idempotency engine. It
// waits up to Config.RouteWait for a bound session with a free window slot
// and a throughput token, assigns the sequence number, calls beforeWrite so
// the caller can durably journal (session, sequence) before any byte leaves,
// writes the frame and waits for the response. Its errors say exactly what
// is known about the outcome: errors.Is(err, ErrNotSent) means nothing was
// written; Ambiguous(err) (ErrTimeout, ErrSessionLost, ErrBadAnswer) means
// the frame was or may have been written and no usable answer came.
package smppclient
