package auth

import (
	"sync"
	"time"
)

// Authenticating a request costs a database round trip, on every request.
// A token never changes owner and this service does not revoke tokens, so a
// replica can remember recent lookups for a short while. Only known tokens
// are remembered: unknown ones would let any client fill the cache.
const (
	tokenCacheTTL  = time.Minute
	tokenCacheSize = 10_000
)

// tokenCache maps a token's hash to its user for tokenCacheTTL.
type tokenCache struct {
	mu      sync.Mutex
	entries map[[32]byte]cachedUser
	now     func() time.Time
}

type cachedUser struct {
	user    User
	expires time.Time
}

func newTokenCache(now func() time.Time) *tokenCache {
	return &tokenCache{entries: make(map[[32]byte]cachedUser), now: now}
}

func (c *tokenCache) get(hash [32]byte) (User, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[hash]
	if !ok || c.now().After(e.expires) {
		return User{}, false
	}
	return e.user, true
}

func (c *tokenCache) put(hash [32]byte, u User) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= tokenCacheSize {
		// Full: start over rather than track recency. A miss is one
		// indexed lookup, so an occasional cold cache costs little.
		clear(c.entries)
	}
	c.entries[hash] = cachedUser{user: u, expires: c.now().Add(tokenCacheTTL)}
}
