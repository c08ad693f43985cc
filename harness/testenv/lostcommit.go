package testenv

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// CommitCutter is a PostgreSQL wire-protocol proxy in front of the test
// server that can lose the answer to one commit: the commit reaches the
// server and is carried out, and the connection is cut before the client
// reads that it was. It is the failure where only a second look at the
// database can tell whether the work happened.
//
// LoseCommitOf arms it for the next commit of a statement whose text
// contains a marker:
//
//   - inside a transaction block, the COMMIT's CommandComplete;
//   - outside one (a statement that commits itself), the statement's own
//     CommandComplete.
//
// The server has sent that message, so the commit is done; the proxy
// holds it back and resets both sides. The client sees its connection
// reset with the outcome unknown. Every other connection and statement
// goes through untouched.
type CommitCutter struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	marker string // "" when not armed
	lost   int
	conns  map[net.Conn]struct{}
}

// NewCommitCutter forwards a fresh loopback port to the test's PostgreSQL
// server until the test ends.
func NewCommitCutter(t testing.TB) *CommitCutter {
	t.Helper()
	u, err := url.Parse(DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("commit cutter: %v", err)
	}
	c := &CommitCutter{target: u.Host, ln: ln, conns: map[net.Conn]struct{}{}}
	go c.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		c.mu.Lock()
		defer c.mu.Unlock()
		for conn := range c.conns {
			_ = conn.Close()
		}
	})
	return c
}

// URL is dbURL (a database of the test server) reached through the proxy.
// TLS is off: the proxy reads the protocol.
func (c *CommitCutter) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	u.Host = c.ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}

// LoseCommitOf arms the proxy: the next commit of a statement containing
// marker is carried out and its answer lost. The proxy disarms itself
// once it has done so.
func (c *CommitCutter) LoseCommitOf(marker string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.marker = marker
}

// Lost is how many commit answers the proxy has held back.
func (c *CommitCutter) Lost() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// armedFor reports whether the proxy is armed for the statement q.
func (c *CommitCutter) armedFor(q string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.marker != "" && strings.Contains(q, c.marker)
}

// cut counts a lost answer and disarms; it reports false when another
// connection got there first.
func (c *CommitCutter) cut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.marker == "" {
		return false
	}
	c.marker = ""
	c.lost++
	return true
}

func (c *CommitCutter) accept() {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		go c.forward(conn)
	}
}

// session is what the proxy knows about one client connection.
type session struct {
	mu sync.Mutex
	// txStatus is the server's last ReadyForQuery status: 'I' idle, 'T'
	// in a transaction block, 'E' in a failed one.
	txStatus byte
	// statements are the prepared statements by name, for Bind.
	statements map[string]string
	// marked: the transaction block ran a marked statement.
	marked bool
	// drop is set when the next CommandComplete with tag dropTag ("" any
	// tag) is the answer to lose.
	drop    bool
	dropTag string
}

func (c *CommitCutter) forward(client net.Conn) {
	server, err := net.Dial("tcp", c.target)
	if err != nil {
		_ = client.Close()
		return
	}
	c.mu.Lock()
	c.conns[client], c.conns[server] = struct{}{}, struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.conns, client)
		delete(c.conns, server)
		c.mu.Unlock()
	}()
	s := &session{txStatus: 'I', statements: map[string]string{}}
	done := make(chan struct{}, 2)
	go func() { _ = c.fromClient(s, client, server); reset(client); reset(server); done <- struct{}{} }()
	go func() { _ = c.fromServer(s, server, client); reset(client); reset(server); done <- struct{}{} }()
	<-done
	<-done
}

// Protocol codes of the untyped first messages.
const (
	sslRequestCode    = 80877103
	gssencRequestCode = 80877104
)

// fromClient copies the client's messages to the server, watching the
// statements they run.
func (c *CommitCutter) fromClient(s *session, client, server net.Conn) error {
	r := bufio.NewReader(client)
	// The startup phase: untyped messages. A request for TLS or GSS
	// encryption is declined here, so the rest stays readable.
	for {
		msg, err := readUntyped(r)
		if err != nil {
			return err
		}
		code := binary.BigEndian.Uint32(msg[4:8])
		if code == sslRequestCode || code == gssencRequestCode {
			if _, err := client.Write([]byte{'N'}); err != nil {
				return err
			}
			continue
		}
		if _, err := server.Write(msg); err != nil {
			return err
		}
		break
	}
	for {
		typ, msg, err := readTyped(r)
		if err != nil {
			return err
		}
		c.watch(s, typ, msg[5:])
		if _, err := server.Write(msg); err != nil {
			return err
		}
	}
}

// watch notes what a client message means for the commit to lose. It
// runs before the message is sent on, so the server's answer is always
// read with the note in place.
func (c *CommitCutter) watch(s *session, typ byte, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var q string
	switch typ {
	case 'Q': // Query: the text
		q = cstring(body)
	case 'P': // Parse: name, text
		name := cstring(body)
		s.statements[name] = cstring(body[len(name)+1:])
		return
	case 'B': // Bind: portal, statement
		portal := cstring(body)
		q = s.statements[cstring(body[len(portal)+1:])]
	default:
		return
	}
	switch verb := strings.ToLower(strings.TrimSpace(q)); {
	case verb == "begin" || strings.HasPrefix(verb, "begin ") || strings.HasPrefix(verb, "start transaction"):
		// The statements sent with it in one pipeline (pgx.Batch.BeginTx)
		// run in the transaction before any ReadyForQuery says so.
		s.txStatus = 'T'
	case verb == "commit" || verb == "end":
		if s.marked {
			s.drop, s.dropTag = true, "COMMIT"
		}
		s.marked = false
	case verb == "rollback" || verb == "abort":
		s.marked = false
	case c.armedFor(q) && s.txStatus == 'I':
		s.drop, s.dropTag = true, ""
	case c.armedFor(q):
		s.marked = true
	}
}

// fromServer copies the server's messages to the client, and cuts both
// connections instead of passing on the answer to lose.
func (c *CommitCutter) fromServer(s *session, server, client net.Conn) error {
	r := bufio.NewReader(server)
	w := bufio.NewWriter(client)
	for {
		typ, msg, err := readTyped(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		switch typ {
		case 'Z': // ReadyForQuery: the transaction status
			s.txStatus = msg[5]
		case 'C': // CommandComplete: the tag
			if s.drop && (s.dropTag == "" || cstring(msg[5:]) == s.dropTag) {
				s.drop = false
				if c.cut() {
					s.mu.Unlock()
					return errCommitLost
				}
			}
		}
		s.mu.Unlock()
		if _, err := w.Write(msg); err != nil {
			return err
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

var errCommitLost = fmt.Errorf("commit answer held back")

// readUntyped reads a startup-phase message: a length, then the rest.
func readUntyped(r *bufio.Reader) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n < 8 || n > 1<<20 {
		return nil, fmt.Errorf("startup message of %d bytes", n)
	}
	msg := make([]byte, n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

// readTyped reads a message: a type byte, a length, then the rest. It
// returns the whole message as read.
func readTyped(r *bufio.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n < 4 {
		return 0, nil, fmt.Errorf("message %q of length %d", head[0], n)
	}
	msg := make([]byte, 1+n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[5:])
	return head[0], msg, err
}

// cstring is the NUL-terminated string at the start of b.
func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}
