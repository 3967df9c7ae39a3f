package smppclient

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

// An upstream address that is in fact a web server (the simulator's stats
// port, say) fails the bind with a reason an operator understands, not a
// decoder's internal error.
func TestBindToAWebServerSaysSoInOperatorWords(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Read(make([]byte, 64)) // the bind, which this server cannot parse
				_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
			}()
		}
	}()
	p := newPool(t, ln.Addr().String(), func(c *Config) { c.Binds = 1; c.ConnectTimeout = time.Second })
	var last string
	testkit.Eventually(t, 10*time.Second, func() bool {
		for _, si := range p.Sessions() {
			last = si.LastError
		}
		return last != ""
	}, "a failed bind recorded")
	if !strings.Contains(last, "web server") {
		t.Errorf("LastError = %q, want it to say the peer is a web server", last)
	}
}
