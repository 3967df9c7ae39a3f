package testkit

import (
	"net"
	"sync"
	"testing"
)

// Serve accepts connections on l until the test ends and runs handle for
// each on its own goroutine. When the test ends it closes l and every
// connection accepted, then waits for the handlers to return, so a fake
// server written with it leaks nothing. handle need not close its
// connection.
func Serve(t testing.TB, l net.Listener, handle func(net.Conn)) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
}
