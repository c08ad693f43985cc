package redisx

import (
	"context"
	"testing"

	"github.com/shop-example/shop/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestPing(t *testing.T) {
	addrs := append(testenv.RedisAddrs(t), "127.0.0.1:1") // the last node is down
	clients := Clients(addrs)
	t.Cleanup(func() {
		if err := Close(clients); err != nil {
			t.Errorf("Close: %v", err)
		}
	})

	if got, want := Ping(context.Background(), clients), len(addrs)-1; got != want {
		t.Errorf("Ping = %d reachable, want %d", got, want)
	}
	if got := Ping(context.Background(), nil); got != 0 {
		t.Errorf("Ping of no clients = %d, want 0", got)
	}
}
