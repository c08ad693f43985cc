package testenv

import (
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// Blackhole returns the address of a server that accepts connections and
// never answers: a Redis node that hangs (a long pause, a partition that
// drops packets), as opposed to one that is down and refuses at once. It
// closes its connections when the test ends.
func Blackhole(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("blackhole: %v", err)
	}
	var (
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				conn.Close()
			}
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, conn) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// ClientAddr returns a client address for a test of the rate limits: one
// in 10/8 with 24 random bits, so counts an earlier or parallel run left in
// the shared Redis (kept there up to the limit's period) do not leak in.
func ClientAddr() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("10.%d.%d.%d", b[0], b[1], b[2])
}
