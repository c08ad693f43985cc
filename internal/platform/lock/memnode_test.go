package lock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	redsyncredis "github.com/go-redsync/redsync/v4/redis"
)

// The hashes of the scripts redsync evaluates (its scripts.go): release
// (delete if the value is ours) and extension (PEXPIRE if it is).
const (
	deleteScriptHash = "e950836ed1e694540c503ef9972b8de518044d3b"
	touchScriptHash  = "d75bb8b5bd13532ddedd17762e772346e39b321e"
)

// memNode is a Redis node held in memory, with what redsync asks of one:
// SET NX with a TTL, GET, and its release and extension scripts. Its keys
// expire by time.Now, so inside a synctest bubble leases run out on the
// bubble's clock and a test of the watchdog's timing costs no wall time.
// A hung node answers nothing until the caller's context ends.
type memNode struct {
	mu   sync.Mutex
	keys map[string]memKey
	hung bool
}

type memKey struct {
	value   string
	expires time.Time
}

// memNodes returns n empty nodes and the redsync pools over them.
func memNodes(n int) ([]*memNode, []redsyncredis.Pool) {
	nodes := make([]*memNode, n)
	pools := make([]redsyncredis.Pool, n)
	for i := range nodes {
		nodes[i] = &memNode{keys: map[string]memKey{}}
		pools[i] = nodes[i]
	}
	return nodes, pools
}

// memLocker returns a Locker over pools, with opts as New takes them.
func memLocker(t *testing.T, pools []redsyncredis.Pool, opts Options) *Locker {
	t.Helper()
	l, err := newLocker(pools, nil, opts)
	if err != nil {
		t.Fatalf("newLocker: %v", err)
	}
	return l
}

// del removes name, as a lease that ran out and went elsewhere would.
func (n *memNode) del(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.keys, name)
}

// has reports whether name is set and not expired.
func (n *memNode) has(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.live(name)
	return ok
}

// hang makes the node stop answering.
func (n *memNode) hang() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hung = true
}

// live returns name's key if it has not expired; n.mu must be held.
func (n *memNode) live(name string) (memKey, bool) {
	k, ok := n.keys[name]
	if ok && !time.Now().Before(k.expires) {
		delete(n.keys, name)
		return memKey{}, false
	}
	return k, ok
}

// Get is the pool's: every connection is the node itself, bound to ctx.
func (n *memNode) Get(ctx context.Context) (redsyncredis.Conn, error) {
	return &memConn{n: n, ctx: ctx}, nil
}

type memConn struct {
	n   *memNode
	ctx context.Context
}

// do runs fn with the node locked, or waits for the context if the node
// is hung.
func (c *memConn) do(fn func()) error {
	c.n.mu.Lock()
	hung := c.n.hung
	if !hung {
		fn()
	}
	c.n.mu.Unlock()
	if hung {
		<-c.ctx.Done()
		return c.ctx.Err()
	}
	return nil
}

func (c *memConn) Get(name string) (string, error) {
	var v string
	err := c.do(func() { k, _ := c.n.live(name); v = k.value })
	return v, err
}

func (c *memConn) Set(name, value string) (bool, error) {
	err := c.do(func() { c.n.keys[name] = memKey{value: value, expires: time.Now().Add(100 * 365 * 24 * time.Hour)} })
	return err == nil, err
}

func (c *memConn) SetNX(name, value string, expiry time.Duration) (bool, error) {
	var set bool
	err := c.do(func() {
		if _, taken := c.n.live(name); !taken {
			c.n.keys[name] = memKey{value: value, expires: time.Now().Add(expiry)}
			set = true
		}
	})
	return set, err
}

func (c *memConn) PTTL(name string) (time.Duration, error) {
	var ttl time.Duration = -2 * time.Millisecond // Redis's "no such key"
	err := c.do(func() {
		if k, ok := c.n.live(name); ok {
			ttl = time.Until(k.expires)
		}
	})
	return ttl, err
}

// Eval runs redsync's release and extension scripts; keysAndArgs is the
// key, the lock's value and, for the extension, the lease in milliseconds.
func (c *memConn) Eval(script *redsyncredis.Script, keysAndArgs ...any) (any, error) {
	name, value := keysAndArgs[0].(string), keysAndArgs[1].(string)
	var (
		status  int64
		unknown bool
	)
	err := c.do(func() {
		k, ok := c.n.live(name)
		switch script.Hash {
		case deleteScriptHash:
			switch {
			case !ok:
				status = -1
			case k.value == value:
				delete(c.n.keys, name)
				status = 1
			}
		case touchScriptHash:
			if ok && k.value == value {
				k.expires = time.Now().Add(time.Duration(keysAndArgs[2].(int)) * time.Millisecond)
				c.n.keys[name] = k
				status = 1
			}
		default:
			unknown = true
		}
	})
	if unknown {
		return nil, fmt.Errorf("memNode: unknown script %s", script.Hash)
	}
	return status, err
}

func (c *memConn) ScriptLoad(*redsyncredis.Script) error { return nil }

func (c *memConn) Close() error { return nil }
