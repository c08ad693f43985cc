package lock

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// These tests need no Redis server: clients connect lazily.

func TestNew_Options(t *testing.T) {
	tests := []struct {
		name    string
		clients int
		opts    Options
		wantErr bool
	}{
		{name: "Defaults", clients: 3},
		{name: "SingleNode", clients: 1},
		{name: "NoNodes", clients: 0, wantErr: true},
		{name: "ExpiryTooShort", clients: 3, opts: Options{Expiry: 10 * time.Millisecond}, wantErr: true},
		{name: "NegativeWaitBudget", clients: 3, opts: Options{WaitBudget: -time.Second}, wantErr: true},
		{name: "UnknownMode", clients: 3, opts: Options{Mode: "lenient"}, wantErr: true},
		{name: "Strict", clients: 3, opts: Options{Mode: Strict}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addrs := make([]string, tt.clients)
			for i := range addrs {
				addrs[i] = deadNode
			}
			clients := redisx.Clients(addrs)
			t.Cleanup(func() { _ = redisx.Close(clients) })

			l, err := New(clients, tt.opts)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New = %v, want error: %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if l.expiry != DefaultExpiry && tt.opts.Expiry == 0 {
				t.Errorf("expiry = %v, want default %v", l.expiry, DefaultExpiry)
			}
			if l.waitBudget != DefaultWaitBudget {
				t.Errorf("wait budget = %v, want default %v", l.waitBudget, DefaultWaitBudget)
			}
			if tt.opts.Mode == "" && l.mode != Degrade {
				t.Errorf("mode = %q, want %q by default", l.mode, Degrade)
			}
			if l.prefix != DefaultPrefix {
				t.Errorf("prefix = %q, want %q", l.prefix, DefaultPrefix)
			}
			if want := tt.clients/2 + 1; l.quorum != want {
				t.Errorf("quorum = %d, want %d", l.quorum, want)
			}
		})
	}

	t.Run("NilClient", func(t *testing.T) {
		if _, err := New([]*redis.Client{nil}, Options{}); err == nil {
			t.Error("New with a nil client = nil error, want an error")
		}
	})
}

// Two Lockers on one registry (one process) share the collectors rather than
// failing to register.
func TestNew_SharedRegistry(t *testing.T) {
	m := metrics.New()
	clients := redisx.Clients([]string{deadNode})
	t.Cleanup(func() { _ = redisx.Close(clients) })

	a, err := New(clients, Options{Metrics: m})
	if err != nil {
		t.Fatalf("first New: %v", err)
	}
	b, err := New(clients, Options{Metrics: m})
	if err != nil {
		t.Fatalf("second New on the same registry: %v", err)
	}
	a.m.outcome(outcomeBusy)
	b.m.outcome(outcomeBusy)
	if got := metricValue(t, m, "shop_lock_acquisitions_total", "outcome", "busy"); got != 2 {
		t.Errorf("busy = %v, want 2 (both Lockers counting into one series)", got)
	}
}

func TestJitter(t *testing.T) {
	for _, d := range []time.Duration{0, minSleep, firstDelay, maxDelay} {
		for range 1000 {
			got := jitter(d)
			if got < minSleep || got > max(d, minSleep) {
				t.Fatalf("jitter(%v) = %v, want within [%v, %v]", d, got, minSleep, max(d, minSleep))
			}
		}
	}
}

func TestQuorumUnreachable(t *testing.T) {
	refused := &redsync.RedisError{Node: 0, Err: errors.New("connection refused")}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"AllNodesDown", errors.Join(refused, &redsync.RedisError{Node: 1, Err: errors.New("i/o timeout")}), true},
		{"OneNodeDownRestFree", refused, true},
		{"TakenOnQuorum", &redsync.ErrTaken{Nodes: []int{0, 1}}, false},
		{"TakenOnOneNodeOthersDown", errors.Join(&redsync.ErrNodeTaken{Node: 0}, refused), false},
		{"TakenWrapped", fmt.Errorf("attempt: %w", errors.Join(refused, &redsync.ErrNodeTaken{Node: 2})), false},
		{"NoNodeDetail", redsync.ErrFailed, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quorumUnreachable(tt.err); got != tt.want {
				t.Errorf("quorumUnreachable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
