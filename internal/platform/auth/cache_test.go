package auth

import (
	"testing"
	"time"
)

func TestTokenCache(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newTokenCache(func() time.Time { return now })
	alice := User{ID: "a", Name: "alice"}
	c.put(hashToken("t1"), alice)

	if u, ok := c.get(hashToken("t1")); !ok || u != alice {
		t.Fatalf("get after put: %+v %v", u, ok)
	}
	if _, ok := c.get(hashToken("t2")); ok {
		t.Fatal("an unknown token was found")
	}
	now = now.Add(tokenCacheTTL + time.Second)
	if _, ok := c.get(hashToken("t1")); ok {
		t.Fatal("an entry outlived its TTL")
	}

	for i := range tokenCacheSize + 1 {
		c.put(hashToken(string(rune(i))), alice)
	}
	if n := len(c.entries); n > tokenCacheSize {
		t.Fatalf("%d entries, bound is %d", n, tokenCacheSize)
	}
}
