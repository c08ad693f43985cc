// Package redisx opens the Redis clients of the lock quorum (DESIGN.md §2).
//
// The nodes are independent servers, not a cluster: Redlock asks each one
// separately and counts the answers. That shapes the client settings. A lock
// request has a budget of a couple of seconds and a node that does not answer
// quickly is as good as down, because the other nodes can still make the
// quorum. So timeouts are short, the client never retries a command on its
// own (the quorum is the redundancy, and a retried SET NX that did succeed the
// first time would read as "taken by someone else"), and connections are
// kept open: a lock command is one round trip on loopback or a LAN.
package redisx

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client settings for a lock node. A node that has not answered within
// nodeTimeout (to dial, read, write, or hand out a pooled connection) is
// counted as down for this attempt; the quorum decides.
const (
	nodeTimeout = 250 * time.Millisecond
	// A lock command is one round trip, but every request in flight makes
	// one on each node; idle connections are kept up to the pool size, as
	// opening one per lock costs more than the lock itself.
	poolSize     = 32
	maxIdleConns = poolSize
)

// Clients returns one client per node address. Creating a client does not
// connect; an unreachable node shows up on first use (or in Ping).
func Clients(addrs []string) []*redis.Client {
	clients := make([]*redis.Client, 0, len(addrs))
	for _, addr := range addrs {
		clients = append(clients, Client(addr))
	}
	return clients
}

// Client returns a client for one lock node with the settings above.
func Client(addr string) *redis.Client {
	return ClientWithin(addr, nodeTimeout)
}

// ClientWithin returns a client for one node with the lock nodes' settings
// but timeout for every wait. The rate limiter's client is one: its call
// answers within the limiter's bound or the request goes on without it,
// and a retried call could count twice.
func ClientWithin(addr string, timeout time.Duration) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         addr,
		DialTimeout:  timeout,
		ReadTimeout:  timeout,
		WriteTimeout: timeout,
		// Honour the caller's deadline too, so redsync's per-node
		// timeout really bounds each attempt.
		ContextTimeoutEnabled: true,
		// -1 disables retries (0 means the default of 3).
		MaxRetries: -1,
		// go-redis redials 5 times with 100 ms pauses by default: half
		// a second per attempt against a dead node.
		DialerRetries: 1,
		PoolSize:      poolSize,
		PoolTimeout:   timeout,
		MaxIdleConns:  maxIdleConns,
		// CLIENT SETINFO is an extra round trip per connection that
		// Redis before 7.2 answers with an error anyway.
		DisableIdentity: true,
	})
}

// Close closes every client, including after an error, and returns the
// errors joined.
func Close(clients []*redis.Client) error {
	var errs []error
	for _, c := range clients {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Ping asks every node at once and returns how many answered.
func Ping(ctx context.Context, clients []*redis.Client) int {
	var (
		wg        sync.WaitGroup
		reachable atomic.Int32
	)
	for _, c := range clients {
		wg.Go(func() {
			if c.Ping(ctx).Err() == nil {
				reachable.Add(1)
			}
		})
	}
	wg.Wait()
	return int(reachable.Load())
}
