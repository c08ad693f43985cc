package testenv_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/harness/testenv"
)

// A link to a real Redis node: through it while up; refused, and the open
// connection cut, while down; through again once up.
func TestLink_DownAndUp(t *testing.T) {
	link := testenv.NewLink(t, testenv.RedisAddrs(t)[0])
	c := redis.NewClient(&redis.Options{Addr: link.Addr(), MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()

	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping through the link: %v", err)
	}
	link.Down()
	// The first ping goes over the pooled connection the link cut, the
	// second dials anew and is reset.
	for i := range 2 {
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatalf("ping %d through a link that is down = nil, want an error", i+1)
		} else if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ping %d: %v, want the connection cut or refused, not a hang", i+1, err)
		}
	}
	link.Up()
	// A new client: go-redis holds back redials for a while after failed ones.
	again := redis.NewClient(&redis.Options{Addr: link.Addr()})
	t.Cleanup(func() { _ = again.Close() })
	if err := again.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after the link is up again: %v", err)
	}
}
