package smppserver

import (
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/smpp"
)

// refusedMetric reads smppproxy_esme_connections_refused_total{reason}
// from a registry holding the server's collector.
func refusedMetric(t *testing.T, srv *Server, reason string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewMetrics(srv))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "smppproxy_esme_connections_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("smppproxy_esme_connections_refused_total{reason=%q} not exported", reason)
	return 0
}

// wantRefusedBy checks that one connection was refused for reason and
// none for other.
func wantRefusedBy(t *testing.T, srv *Server, reason, other string) {
	t.Helper()
	if got := refusedMetric(t, srv, reason); got != 1 {
		t.Errorf("refused{reason=%s} = %v, want 1", reason, got)
	}
	if got := refusedMetric(t, srv, other); got != 0 {
		t.Errorf("refused{reason=%s} = %v, want 0", other, got)
	}
}

// Beyond MaxConnections a connection is accepted and closed at once, with
// nothing sent, and counted; the open ones keep working, and once one of
// them ends a new connection is served again.
func TestConnectionsBeyondTheTotalCapAreClosedAtOnceAndCounted(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, nil, func(s *Server) { s.MaxConnections = 2 })

	a := dialBound(t, addr, smpp.CmdBindTransceiver)
	b := dialESME(t, addr)
	b.expectOpen("second connection, unbound")

	extra := dialESME(t, addr)
	extra.expectClosed("third connection with max_connections 2")
	wantRefusedBy(t, srv, "max_connections", "max_connections_per_ip")
	a.submit("bound session after a refusal", smpp.StatusOK)
	b.expectOpen("unbound session after a refusal")

	_ = b.conn.Close()
	waitFor(t, "the closed connection to be released", func() bool { return srv.OpenConnections() == 1 })
	dialBound(t, addr, smpp.CmdBindTransceiver)
}

// Beyond MaxConnectionsPerIP a connection from that address is accepted
// and closed at once and counted; another address is still served.
func TestConnectionsBeyondThePerIPCapAreClosedAtOnceAndCounted(t *testing.T) {
	t.Parallel()
	srv := newTestServer(nil)
	srv.MaxConnectionsPerIP = 2
	srv.MaxConnections = 100
	addr := RunLocalServer(t, srv)

	for i := 0; i < 2; i++ {
		dialESME(t, addr).expectOpen("connection within the per-IP cap")
	}
	extra := dialESME(t, addr)
	extra.expectClosed("third connection from 127.0.0.1 with max_connections_per_ip 2")
	wantRefusedBy(t, srv, "max_connections_per_ip", "max_connections")

	// Another source address on the loopback interface has its own count.
	d := net.Dialer{Timeout: ioTimeout, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.2 here: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	other := newESME(t, conn)
	other.mustBind(smpp.CmdBindTransceiver, "shop")
}
