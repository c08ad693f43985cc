package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// `shop events failed` lists an event a consumer gave up on, with its
// refusal; `shop events replay ID` puts it back on its stream; a replay
// of an id that did not fail is refused, and a bare `replay` is a usage
// error.
func TestEvents_FailedAndReplay(t *testing.T) {
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	addr := testenv.RedisAddrs(t)[0]
	prefix := "test:" + rand.Text()[:10] + ":"
	t.Setenv("SHOP_DATABASE_URL", url)
	t.Setenv("SHOP_REDIS_ADDRS", addr)
	t.Setenv("SHOP_GATEWAY_URL", "http://127.0.0.1:1")
	t.Setenv("SHOP_EVENTS_PREFIX", prefix)
	db := testenv.PoolFor(t, url)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Del(ctx, prefix+outbox.BookingConfirmed); _ = rdb.Close() })

	e, err := outbox.New(outbox.BookingConfirmed, "booking-1", time.Now(), map[string]string{"booking_id": "booking-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.InTx(ctx, db, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, e) }); err != nil {
		t.Fatal(err)
	}
	cause := fmt.Errorf("mail send: 400 invalid_request: subject: at most 200 characters: %w", outbox.ErrPermanent)
	if err := outbox.GiveUp(ctx, db, "mailer", e, cause, time.Now()); err == nil {
		t.Fatal("GiveUp returned no error")
	}

	var out bytes.Buffer
	if err := eventsCmd(ctx, []string{"failed"}, &out); err != nil {
		t.Fatalf("events failed: %v", err)
	}
	if !strings.Contains(out.String(), e.ID) || !strings.Contains(out.String(), "subject: at most 200 characters") {
		t.Errorf("events failed printed:\n%s\nwant the event and its refusal", out.String())
	}
	out.Reset()
	if err := eventsCmd(ctx, []string{"replay", e.ID}, &out); err != nil {
		t.Fatalf("events replay: %v\n%s", err, out.String())
	}
	if n, err := rdb.XLen(ctx, prefix+outbox.BookingConfirmed).Result(); err != nil || n != 1 {
		t.Errorf("the stream holds %d entries (%v) after the replay, want 1", n, err)
	}
	if err := eventsCmd(ctx, []string{"replay", "00000000-0000-0000-0000-000000000000"}, &out); err == nil {
		t.Error("a replay of an event that did not fail succeeded")
	}
	if err := eventsCmd(ctx, []string{"replay"}, &out); err != errUsage {
		t.Errorf("replay without ids: %v, want the usage", err)
	}
}
