package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Link is a TCP connection to a real server that a test can cut: a
// forwarder on a loopback port of its own. Down cuts every connection
// through it and resets each new one, which is what a client sees when the
// server is gone; Up lets connections through again. The servers the tests
// share stay up, so no other test is disturbed.
//
// A link that is down keeps its port open rather than closing it: the
// kernel hands a closed port out again as the local port of outgoing
// connections, and Up could then not take it back.
type Link struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

// NewLink forwards a fresh loopback port to target (host:port) until the
// test ends.
func NewLink(t testing.TB, target string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("link to %s: %v", target, err)
	}
	l := &Link{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	go l.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		l.Down()
	})
	return l
}

// Addr is the address to connect to instead of the target's.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Down cuts the connections open through the link and resets new ones.
func (l *Link) Down() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = true
	for c := range l.conns {
		reset(c)
	}
	clear(l.conns)
}

// Up lets new connections through again.
func (l *Link) Up() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = false
}

func (l *Link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		go l.forward(c)
	}
}

// forward copies both ways between c and a new connection to the target.
// The target is dialled per connection, so a link that is up reaches a
// target that is up.
func (l *Link) forward(c net.Conn) {
	l.mu.Lock()
	down := l.down
	l.mu.Unlock()
	if down {
		reset(c)
		return
	}
	up, err := net.Dial("tcp", l.target)
	if err != nil {
		reset(c)
		return
	}
	if !l.track(c, up) {
		return
	}
	pipe := func(dst, src net.Conn) {
		if _, err := io.Copy(dst, src); err == nil {
			// src ended its stream: pass the end on, and let the other
			// direction deliver what it still has.
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
				return
			}
		}
		_ = dst.Close()
		_ = src.Close()
	}
	var wg sync.WaitGroup
	wg.Go(func() { pipe(up, c) })
	wg.Go(func() { pipe(c, up) })
	wg.Wait()
	l.untrack(c, up)
}

// track registers the pair, or resets it when the link is down.
func (l *Link) track(conns ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		for _, c := range conns {
			reset(c)
		}
		return false
	}
	for _, c := range conns {
		l.conns[c] = struct{}{}
	}
	return true
}

func (l *Link) untrack(conns ...net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(l.conns, c)
	}
}

// reset closes c with an RST rather than an orderly end of stream, so the
// peer's next read or write fails at once.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
