package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/postgres"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// How long a test waits for an event the relay should publish, and how
// long it watches for one it should not (the relay polls every 100 ms).
const (
	publishWithin = 10 * time.Second
	heldFor       = time.Second
)

// TestRelay_LongTransaction: a transaction that holds a transaction id
// (any write does; pg_current_xact_id takes one without writing) stays
// open while an event is committed. In another database of the same
// server it cannot write to this outbox, and the relay publishes the
// event at once: the long migration, backup or batch job on a
// neighbouring database no longer delays receipts. In the shop's own
// database it holds the relay back until it ends, as DESIGN §9 says.
func TestRelay_LongTransaction(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"other_database", "same_database"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testenv.Pool(t)
			other := db
			if where == "other_database" {
				other = testenv.Pool(t)
			}
			long := holdTransactionID(t, other)
			relay, published := startRelay(t, db, sqlHorizon)
			e := mustWrite(t, db, OrderPaid, "order-1")

			if where == "other_database" {
				waitPublished(t, published, e, "with a transaction open in another database")
				// The relay moves its offset in the transaction that read
				// the event, which commits after the publish.
				deadline := time.Now().Add(publishWithin)
				for {
					lag, err := relay.Lag(ctx)
					if err == nil && lag == 0 {
						return
					}
					if err != nil || time.Now().After(deadline) {
						t.Fatalf("lag = %v, %v; want 0 once published", lag, err)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			time.Sleep(heldFor)
			if slices.Contains(published(OrderPaid), e.ID) {
				t.Fatal("published while an older transaction of this database was open; the gate is gone")
			}
			if lag, err := relay.Lag(ctx); err != nil || lag < heldFor/2 {
				t.Errorf("lag = %v, %v; want the event's age while it is held", lag, err)
			}
			if err := long.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			waitPublished(t, published, e, "once the transaction ended")
		})
	}
}

// TestRelay_RowCommittedLateIsPublished: what the horizon is for. A
// transaction that wrote an event commits after a younger one that wrote
// another, and the relay has published the younger one's meanwhile. With
// the relay's horizon the older transaction's event is published once it
// commits. With the gate taken off (every transaction that had ended when
// the relay looked: snapshot xmax), the relay moves past the older
// transaction while it is in flight and its event is never published.
func TestRelay_RowCommittedLateIsPublished(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		horizon   string
		published bool
	}{
		{"Horizon", sqlHorizon, true},
		{"NoGate", "pg_snapshot_xmax(pg_current_snapshot())", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testenv.Pool(t)
			_, published := startRelay(t, db, tt.horizon)

			older, err := db.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer older.Rollback(ctx) //nolint:errcheck // committed below
			late := mustNew(t, OrderPaid, "order-late")
			if err := Write(ctx, older, late); err != nil {
				t.Fatal(err)
			}
			early := mustWrite(t, db, OrderPaid, "order-early")
			if tt.published {
				time.Sleep(heldFor) // the relay may not read past the older transaction
			} else {
				waitPublished(t, published, early, "past a transaction in flight")
			}
			if err := older.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if !tt.published {
				time.Sleep(heldFor)
				if slices.Contains(published(OrderPaid), late.ID) {
					t.Fatal("the late row was published with the gate off; this test no longer shows what the gate prevents")
				}
				return
			}
			waitPublished(t, published, late, "once its transaction committed")
			waitPublished(t, published, early, "after the older transaction")
		})
	}
}

// TestRelay_TwoRelaysPublishEachEventOnce: eight writers commit 50
// events each, then the relays of two replicas start on the backlog at
// once, while the writers commit as many again. Each pass of a relay
// locks the offsets row, so they take turns: every event is on its stream
// exactly once (no batch published by both), and each writer's events in
// the order they committed. Without the lock (the offsets row read
// without FOR UPDATE) both relays publish the backlog: 1,245 and 1,564
// entries for the 800 events in two tries.
func TestRelay_TwoRelaysPublishEachEventOnce(t *testing.T) {
	t.Parallel()
	const writers, each = 8, 100
	db := testenv.Pool(t)
	prefix := "test:" + randomHex(t) + ":"
	written := make([][]string, writers)
	write := func(from, to int) {
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := from; i < to; i++ {
					e := mustWrite(t, db, OrderPaid, fmt.Sprintf("order-%d-%d", w, i))
					written[w] = append(written[w], e.ID)
				}
			})
		}
		wg.Wait()
	}
	write(0, each/2)
	_, published := startRelayOn(t, db, sqlHorizon, prefix)
	startRelayOn(t, db, sqlHorizon, prefix)

	write(each/2, each)
	deadline := time.Now().Add(publishWithin)
	var ids []string
	for ids = published(OrderPaid); len(ids) < writers*each && time.Now().Before(deadline); ids = published(OrderPaid) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(heldFor) // a second copy of a batch would come in now
	ids = published(OrderPaid)
	if len(ids) != writers*each {
		t.Fatalf("%d entries on the stream for %d events", len(ids), writers*each)
	}
	at := map[string]int{}
	for i, id := range ids {
		if _, twice := at[id]; twice {
			t.Fatalf("event %s published twice", id)
		}
		at[id] = i
	}
	for w, evs := range written {
		for i := 1; i < len(evs); i++ {
			if at[evs[i]] < at[evs[i-1]] {
				t.Fatalf("writer %d: event %d published before event %d, which committed first", w, i, i-1)
			}
		}
	}
}

// TestRedeliver_NotWhatTheStreamStillHolds: an event its consumer has not
// recorded is published again only when it cannot still be waiting in the
// stream. Published, and the consumer's group behind it (created before
// the event, reading nothing): the redelivery leaves it, where publishing
// it again would add a copy behind the one the group has yet to read (and
// did, one redelivery per pass, with the group's front not asked). Once
// the stream is gone (Redis restarted empty), it is published again.
func TestRedeliver_NotWhatTheStreamStillHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Pool(t)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddrs(t)[0]})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := "test:" + randomHex(t) + ":"
	stream := prefix + OrderPaid
	t.Cleanup(func() { rdb.Del(context.Background(), stream) })
	const after = 300 * time.Millisecond
	relay, err := NewRelay(db, rdb, Options{Prefix: prefix, RedeliverAfter: after,
		Consumers: map[string][]string{OrderPaid: {"mailer"}},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.XGroupCreateMkStream(ctx, stream, "mailer", "0").Err(); err != nil {
		t.Fatal(err)
	}
	e := mustWrite(t, db, OrderPaid, "order-queued")
	if _, err := db.Exec(ctx, sqlZeroOffset, relayGroup); err != nil {
		t.Fatal(err)
	}
	if n, err := relay.Forward(ctx); err != nil || n != 1 {
		t.Fatalf("forward = %d, %v; want the event published", n, err)
	}
	time.Sleep(after + after/2) // past RedeliverAfter
	for pass := range 3 {
		if n, err := relay.Redeliver(ctx); err != nil || n != 0 {
			t.Fatalf("pass %d: redelivered %d, %v; want 0: the event waits in the stream for its group", pass, n, err)
		}
		time.Sleep(after)
	}
	if n := rdb.XLen(ctx, stream).Val(); n != 1 {
		t.Fatalf("%d entries in the stream, want the one", n)
	}

	if err := rdb.Del(ctx, stream).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := relay.Redeliver(ctx); err != nil || n != 1 {
		t.Fatalf("with the stream gone: redelivered %d, %v; want the event again", n, err)
	}
	ids, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil || len(ids) != 1 {
		t.Fatalf("stream after the redelivery: %v, %v", ids, err)
	}
	if m, err := (redisstream.DefaultMarshallerUnmarshaller{}).Unmarshal(ids[0].Values); err != nil || m.UUID != e.ID {
		t.Fatalf("redelivered %v, %v; want %s", m, err, e.ID)
	}
}

// startRelay runs a relay of db's outbox gated by horizon, to streams of the
// test's own, until the test ends. published lists the ids of the events
// on an event's stream.
func startRelay(t *testing.T, db *pgxpool.Pool, horizon string) (*Relay, func(name string) []string) {
	t.Helper()
	return startRelayOn(t, db, horizon, "test:"+randomHex(t)+":")
}

// startRelayOn is startRelay to the streams named with prefix.
func startRelayOn(t *testing.T, db *pgxpool.Pool, horizon, prefix string) (*Relay, func(name string) []string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddrs(t)[0]})
	t.Cleanup(func() { _ = rdb.Close() })
	relay, err := NewRelay(db, rdb, Options{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	relay.horizon = horizon
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); relay.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	published := func(name string) []string {
		entries, err := rdb.XRange(context.Background(), prefix+name, "-", "+").Result()
		if err != nil {
			t.Errorf("read stream %s: %v", name, err)
			return nil
		}
		var ids []string
		for _, e := range entries {
			m, err := redisstream.DefaultMarshallerUnmarshaller{}.Unmarshal(e.Values)
			if err != nil {
				t.Errorf("entry %s: %v", e.ID, err)
				continue
			}
			ids = append(ids, m.UUID)
		}
		return ids
	}
	return relay, published
}

// waitPublished fails the test unless e is on its stream within publishWithin.
func waitPublished(t *testing.T, published func(string) []string, e Event, when string) {
	t.Helper()
	deadline := time.Now().Add(publishWithin)
	for !slices.Contains(published(e.Name), e.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("%s of %s not published within %s %s", e.Name, e.Subject, publishWithin, when)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdTransactionID opens a transaction on db that holds a transaction id
// until the test ends or the caller rolls it back.
func holdTransactionID(t *testing.T, db *pgxpool.Pool) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	return tx
}

func mustNew(t *testing.T, name, subject string) Event {
	t.Helper()
	e, err := New(name, subject, time.Now(), map[string]string{"id": subject})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// mustWrite commits the event name about subject in a transaction of its own.
func mustWrite(t *testing.T, db *pgxpool.Pool, name, subject string) Event {
	t.Helper()
	e := mustNew(t, name, subject)
	if err := postgres.InTx(context.Background(), db, func(tx pgx.Tx) error {
		return Write(context.Background(), tx, e)
	}); err != nil {
		t.Fatal(err)
	}
	return e
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestFailures_ListedReplayedResolved: an event a consumer gave up on is
// listed, with its refusal and how many deliveries were refused, and
// counted by shop_events_failed; a replay publishes it again to its
// stream; once the consumer has it in its inbox, it is resolved: no
// longer listed or counted, and the retention deletes its row.
func TestFailures_ListedReplayedResolved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Pool(t)
	relay, published := startRelay(t, db, sqlHorizon)
	e := mustWrite(t, db, BookingConfirmed, "booking-1")
	waitPublished(t, published, e, "at first")

	cause := fmt.Errorf("mail send: 400 invalid_request: subject: at most 200 characters: %w", ErrPermanent)
	for range 2 { // the first delivery, then a redelivery refused again
		if err := GiveUp(ctx, db, "mailer", e, cause, time.Now()); !errors.Is(err, ErrPermanent) {
			t.Fatalf("GiveUp = %v, want the permanent cause back", err)
		}
	}
	failures, err := Failures(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(failures) != 1 || failures[0].Event.ID != e.ID || failures[0].Consumer != "mailer" ||
		failures[0].Attempts != 2 || failures[0].Error != cause.Error() || string(failures[0].Event.Data) != string(e.Data) {
		t.Fatalf("failures = %+v, want %s of mailer refused twice", failures, e.ID)
	}
	if n, err := relay.failedCount(ctx); err != nil || n != 1 {
		t.Fatalf("failed count = %d, %v; want 1", n, err)
	}

	if _, err := relay.Replay(ctx, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, ErrNoFailure) {
		t.Errorf("replay of an event that did not fail: %v, want ErrNoFailure", err)
	}
	replayed, err := relay.Replay(ctx, e.ID)
	if err != nil || len(replayed) != 1 {
		t.Fatalf("replay = %+v, %v", replayed, err)
	}
	deadline := time.Now().Add(publishWithin)
	for count(published(e.Name), e.ID) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the replay is not on the stream: %v", published(e.Name))
		}
		time.Sleep(20 * time.Millisecond)
	}

	var fresh bool
	b := &pgx.Batch{}
	QueueRecord(b, "mailer", e, time.Now(), &fresh)
	if err := db.SendBatch(ctx, b).Close(); err != nil || !fresh {
		t.Fatalf("record: fresh %v, %v", fresh, err)
	}
	if failures, err := Failures(ctx, db); err != nil || len(failures) != 0 {
		t.Errorf("after the consumer recorded it: failures = %+v, %v; want none", failures, err)
	}
	if n, err := relay.failedCount(ctx); err != nil || n != 0 {
		t.Errorf("failed count = %d, %v; want 0", n, err)
	}
	if err := relay.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM outbox_failed`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("outbox_failed holds %d rows (%v) after the retention, want 0", rows, err)
	}
}

// TestGiveUp_UnrecordedIsNotPermanent: a failure that cannot be recorded
// (here the table is gone) is not acknowledged: the error GiveUp returns
// is not permanent, so the delivery is tried again later.
func TestGiveUp_UnrecordedIsNotPermanent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Pool(t)
	if _, err := db.Exec(ctx, `DROP TABLE outbox_failed`); err != nil {
		t.Fatal(err)
	}
	e := mustNew(t, OrderPaid, "order-1")
	err := GiveUp(ctx, db, "mailer", e, fmt.Errorf("refused: %w", ErrPermanent), time.Now())
	if err == nil || errors.Is(err, ErrPermanent) {
		t.Fatalf("GiveUp = %v, want an error that is not permanent", err)
	}
}

func count(ids []string, id string) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// TestRedeliver_FromTheFloor: the redelivery reads the table from its
// floor, the oldest event a consumer had not recorded at the last pass,
// and not before the horizon: an event of a transaction still in flight
// while every later one was recorded is redelivered once it commits. With
// the floor moved to the newest transaction instead (no gate), the pass
// that saw every committed event recorded moves past the one still in
// flight, and it is never published again. Once all are recorded, the
// floor is past every row: the next pass reads none of them.
func TestRedeliver_FromTheFloor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		horizon     string
		redelivered bool
	}{
		{"Horizon", sqlHorizon, true},
		{"NoGate", "pg_snapshot_xmax(pg_current_snapshot())", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testenv.Pool(t)
			rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddrs(t)[0]})
			t.Cleanup(func() { _ = rdb.Close() })
			prefix := "test:" + randomHex(t) + ":"
			t.Cleanup(func() { rdb.Del(context.Background(), prefix+OrderPaid) })
			const after = 200 * time.Millisecond
			relay, err := NewRelay(db, rdb, Options{Prefix: prefix, RedeliverAfter: after,
				Consumers: map[string][]string{OrderPaid: {"mailer"}},
				Logger:    slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			relay.horizon = tt.horizon
			record := func(e Event) {
				t.Helper()
				if _, err := db.Exec(ctx, `INSERT INTO inbox (consumer, event_id, event, processed_at) VALUES ('mailer', $1, $2, now())`,
					e.ID, e.Name); err != nil {
					t.Fatal(err)
				}
			}

			older := holdTransactionID(t, db)
			late := mustNew(t, OrderPaid, "order-late")
			if err := Write(ctx, older, late); err != nil {
				t.Fatal(err)
			}
			for _, subject := range []string{"order-1", "order-2", "order-3"} {
				record(mustWrite(t, db, OrderPaid, subject))
			}
			time.Sleep(after + after/2)
			if n, err := relay.Redeliver(ctx); err != nil || n != 0 {
				t.Fatalf("first pass: redelivered %d, %v; want 0, every committed event recorded", n, err)
			}
			if err := older.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(after + after/2)
			n, err := relay.Redeliver(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.redelivered {
				if n != 0 {
					t.Fatalf("redelivered %d with the floor past the transaction in flight; this test no longer shows what the horizon prevents", n)
				}
				return
			}
			if n != 1 {
				t.Fatalf("redelivered %d once the late transaction committed, want its event", n)
			}
			record(late)
			if n, err := relay.Redeliver(ctx); err != nil || n != 0 {
				t.Fatalf("with every event recorded: redelivered %d, %v; want 0", n, err)
			}
			var past bool
			if err := db.QueryRow(ctx, `SELECT $1::xid8 > max(transaction_id) FROM watermill_outbox`, relay.floor).Scan(&past); err != nil || !past {
				t.Fatalf("floor %s after every event was recorded: past every row %v, %v; want past", relay.floor, past, err)
			}
		})
	}
}
