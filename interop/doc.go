// Package interop holds interoperability tests of the proxy against an
// independent SMPP implementation, github.com/fiorix/go-smpp (v2 code
// under its v1 import paths, see the replace in go.mod).
//
// Every other end-to-end test uses the project's own SMPP client (esme)
// and SMSC simulator (sim, built on smppserver), so an encoding mistake
// shared by both sides could go unnoticed. Here:
//
//   - a fiorix smpp.Transceiver is the ESME in front of the proxy, with the
//     project's simulator behind it;
//   - a fiorix smpptest.Server is the upstream SMSC behind the proxy, with
//     the project's ESME client in front of it;
//   - both fiorix ends are used at once, under windowed load with
//     duplicates.
//
// The package has no non-test code besides this comment.
package interop
