package idempotency

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// insertKeys adds n keys named prefix-0… created at createdAt; completed
// keys hold an answer, the others are claims leased until lockedUntil.
func insertKeys(t *testing.T, db *pgxpool.Pool, prefix string, n int, createdAt, lockedUntil time.Time, completed bool) {
	t.Helper()
	_, err := db.Exec(context.Background(), `
		INSERT INTO idempotency_keys (principal, key, fingerprint, owner, locked_until, status_code, body, created_at, completed_at)
		SELECT 'alice', $1::text || '-' || i, '\x00', gen_random_uuid(), $3::timestamptz,
		       CASE WHEN $5::bool THEN 201 END, CASE WHEN $5::bool THEN '{}'::bytea END,
		       $4::timestamptz, CASE WHEN $5::bool THEN $4::timestamptz END
		  FROM generate_series(0, $2::int - 1) AS i`,
		prefix, n, lockedUntil, createdAt, completed)
	if err != nil {
		t.Fatalf("insert %s keys: %v", prefix, err)
	}
}

func countKeys(t *testing.T, db *pgxpool.Pool, prefix string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(),
		`SELECT count(*) FROM idempotency_keys WHERE key LIKE $1 || '-%'`, prefix).Scan(&n); err != nil {
		t.Fatalf("count %s keys: %v", prefix, err)
	}
	return n
}

func TestSweep_DeletesOnlyOldKeys(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	now := h.clock.Now()
	insertKeys(t, h.db, "old", 3, now.Add(-2*time.Hour), now.Add(-2*time.Hour), true)
	insertKeys(t, h.db, "crashed", 2, now.Add(-2*time.Hour), now.Add(-time.Hour), false)
	insertKeys(t, h.db, "young", 4, now.Add(-30*time.Minute), now.Add(-30*time.Minute), true)
	insertKeys(t, h.db, "running", 1, now.Add(-2*time.Hour), now.Add(time.Minute), false)

	n, err := h.store.Sweep(context.Background(), time.Hour)
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if n != 5 {
		t.Fatalf("swept %d keys, want 5", n)
	}
	for prefix, want := range map[string]int{"old": 0, "crashed": 0, "young": 4, "running": 1} {
		if got := countKeys(t, h.db, prefix); got != want {
			t.Errorf("%s keys left: %d, want %d", prefix, got, want)
		}
	}
	if got := counter(t, h, "shop_idempotency_swept_total"); got != 5 {
		t.Errorf("swept counter = %v, want 5", got)
	}
	if _, err := h.store.Sweep(context.Background(), 0); err == nil {
		t.Error("sweeping with olderThan 0 (every key) was accepted")
	}
}

// Sweepers in every replica run at once: between them each old key is
// deleted exactly once, in batches, and none waits for another.
func TestSweep_Concurrent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	now := h.clock.Now()
	const old = 2*sweepBatch + 500
	insertKeys(t, h.db, "old", old, now.Add(-48*time.Hour), now.Add(-48*time.Hour), true)
	insertKeys(t, h.db, "young", 10, now.Add(-time.Hour), now.Add(-time.Hour), true)

	const sweepers = 4
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int64
	)
	for range sweepers {
		wg.Go(func() {
			n, err := h.store.Sweep(context.Background(), 24*time.Hour)
			if err != nil {
				t.Errorf("sweep: %v", err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	// A sweeper that found the rest locked stops early; one more round
	// (the next tick) finishes whatever it left.
	n, err := h.store.Sweep(context.Background(), 24*time.Hour)
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	total += n
	if total != old {
		t.Fatalf("sweepers deleted %d keys between them, want %d", total, old)
	}
	if got := countKeys(t, h.db, "old"); got != 0 {
		t.Fatalf("%d old keys left", got)
	}
	if got := countKeys(t, h.db, "young"); got != 10 {
		t.Fatalf("%d young keys left, want 10", got)
	}
}

func TestRunSweeper_UsesRetention(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	now := h.clock.Now()
	insertKeys(t, h.db, "old", 3, now.Add(-MinRetention-time.Minute), now.Add(-MinRetention), true)
	insertKeys(t, h.db, "young", 2, now.Add(-MinRetention+time.Minute), now.Add(-MinRetention), true)

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		h.store.RunSweeper(ctx, time.Hour)
		close(stopped)
	}()
	// The first sweep runs at once; wait for it without a timed assertion.
	deadline := time.Now().Add(testDeadline)
	for countKeys(t, h.db, "old") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("old keys were not swept")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wait(t, stopped, "the sweeper to stop")
	if got := countKeys(t, h.db, "young"); got != 2 {
		t.Fatalf("%d young keys left, want 2 (retention is %s)", got, MinRetention)
	}
}

func TestNewStore_RetentionFloor(t *testing.T) {
	t.Parallel()
	for _, r := range []time.Duration{0, time.Hour, MinRetention, 48 * time.Hour} {
		s := NewStore(nil, Options{Retention: r})
		want := max(r, MinRetention)
		if s.retention != want {
			t.Errorf("Retention %s: got %s, want %s", r, s.retention, want)
		}
		if s.lease != DefaultLease {
			t.Errorf("lease %s, want %s", s.lease, DefaultLease)
		}
	}
}
