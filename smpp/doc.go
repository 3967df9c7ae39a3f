// Package smpp holds the wire-level pieces shared by the ESME-facing server,
// the upstream client and the idempotency engine: the SMPP status table,
// the bind type (BindType, declared here once for both sides), framing
// with length checks, and a byte-exact view of submit_sm that the proxy
// forwards without re-encoding.
//
// Decoding of every other PDU is done with gosmpp's pdu package, behind a
// recover (Guard) because gosmpp panics on some inputs; submit_sm is
// kept as raw bytes because re-marshalling it through gosmpp rewrites
// data_coding values it does not know and re-encodes UDHs, and a proxy must
// forward exactly what the client sent (minus the idempotency key TLV).
package smpp
