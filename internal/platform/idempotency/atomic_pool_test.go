package idempotency

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// TestAtomic_DuplicatesDoNotStallThePool: the flow's pool has 8
// connections. One request holds its key's claim in an open transaction
// while 49 copies of it arrive, and 40 other users' requests run. The
// copies are refused at once (try-advisory-lock): none waits inside
// PostgreSQL, none keeps a connection, and every other user is answered
// while the first request still holds its transaction.
//
// Without the try-lock, as a naive claim in the transaction would be, the
// copies wait inside PostgreSQL on the unique index, each holding a
// connection: the pool is full of them, and no other user is answered
// until the first request commits.
func TestAtomic_DuplicatesDoNotStallThePool(t *testing.T) {
	t.Parallel()
	const poolSize, others = 8, 40
	for _, tt := range []struct {
		name       string
		copies     int
		claimWaits bool
	}{
		{"NoDuplicates", 0, false},
		{"TryLock", 49, false},
		{"WithoutTheTryLock", 49, true},
	} {
		// One after the other, so that their latencies compare.
		t.Run(tt.name, func(t *testing.T) {
			url := testenv.DatabaseURL(t)
			flowDB, err := postgres.Open(context.Background(), url, poolSize)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(flowDB.Close)
			h := newHarnessOn(t, testenv.PoolFor(t, url), flowDB, Options{})
			h.claimWaits = tt.claimWaits
			waiting := sampleWaits(t, h)

			first := start(t, h, request{path: atomicPath, key: "hot", gate: "first"})
			var (
				copyReplies  = make([]reply, tt.copies)
				otherLatency = make([]time.Duration, others)
				answered     atomic.Int64 // copies and others answered
				othersDone   atomic.Int64
				wg           sync.WaitGroup
			)
			for i := range tt.copies {
				wg.Go(func() {
					copyReplies[i] = h.mustSend(t, request{path: atomicPath, key: "hot"})
					answered.Add(1)
				})
			}
			// The others start once the copies have taken what they take:
			// every copy answered, or the pool's other connections held by
			// copies waiting inside PostgreSQL.
			for answered.Load() < int64(tt.copies) && waiting.now() < poolSize-1 {
				time.Sleep(time.Millisecond)
			}
			for i := range others {
				wg.Go(func() {
					began := time.Now()
					rep := h.mustSend(t, request{path: atomicPath, key: "other", user: fmt.Sprintf("user-%d", i)})
					otherLatency[i] = time.Since(began)
					if rep.status != http.StatusCreated {
						t.Errorf("user-%d: got %d %s, want 201", i, rep.status, rep.body)
					}
					othersDone.Add(1)
					answered.Add(1)
				})
			}
			// The first request commits once everyone else is answered; or,
			// if that does not happen while it holds its transaction, after
			// a second, which is the stall the other variant shows.
			deadline := time.Now().Add(testDeadline)
			if tt.claimWaits {
				deadline = time.Now().Add(time.Second)
			}
			for answered.Load() < int64(tt.copies+others) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			beforeCommit := othersDone.Load()
			h.gate("first").release()
			if rep := <-first; rep.status != http.StatusCreated {
				t.Fatalf("first: got %d %s", rep.status, rep.body)
			}
			wg.Wait()
			waited := waiting.stop()

			slices.Sort(otherLatency)
			t.Logf("%d copies: %d of %d others answered while the first held its transaction; their latency p50 %s, max %s; most sessions waiting on a lock at once: %d",
				tt.copies, beforeCommit, others, otherLatency[others/2], otherLatency[others-1], waited)

			// The invariant: one effect per key, whatever the copies did.
			if got := h.effects(t, "alice", "hot"); got != 1 {
				t.Errorf("%d effects of the hot key, want 1", got)
			}
			for i := range others {
				if got := h.effects(t, fmt.Sprintf("user-%d", i), "other"); got != 1 {
					t.Errorf("user-%d: %d effects, want 1", i, got)
				}
			}
			if tt.claimWaits {
				if waited == 0 || beforeCommit == others {
					t.Fatalf("without the try-lock: %d sessions waited, %d of %d others answered while the first held its transaction; want copies waiting and the pool stalled",
						waited, beforeCommit, others)
				}
				return
			}
			if waited != 0 {
				t.Errorf("%d sessions waited on a lock inside PostgreSQL, want none", waited)
			}
			if beforeCommit != others {
				t.Errorf("%d of %d others answered while the first held its transaction, want all", beforeCommit, others)
			}
			for _, rep := range copyReplies {
				if rep.status != http.StatusConflict || rep.code() != "request_in_progress" {
					t.Fatalf("copy: got %d %s, want 409 request_in_progress", rep.status, rep.body)
				}
			}
		})
	}
}

// waits samples how many sessions of the test's database wait for a lock.
type waits struct {
	current, most atomic.Int64
	stopped       chan struct{}
	done          chan struct{}
}

func (w *waits) now() int64 { return w.current.Load() }

// stop ends the sampling and returns the most sessions seen waiting at once.
func (w *waits) stop() int64 {
	close(w.stopped)
	<-w.done
	return w.most.Load()
}

// sampleWaits samples pg_locks every millisecond, on the store's pool (not
// the flow's), until stopped: the sessions waiting for a lock another
// transaction holds. A relation's extension lock, which concurrent inserts
// take in turn to add a page, is no wait for another request.
func sampleWaits(t *testing.T, h *harness) *waits {
	t.Helper()
	w := &waits{stopped: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			var n int64
			err := h.db.QueryRow(context.Background(), `
				SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				 WHERE NOT l.granted AND l.locktype <> 'extend' AND a.datname = current_database()`).Scan(&n)
			if err != nil {
				t.Errorf("sample lock waits: %v", err)
				return
			}
			w.current.Store(n)
			if n > w.most.Load() {
				w.most.Store(n)
			}
			select {
			case <-w.stopped:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-w.stopped:
		default:
			w.stop()
		}
	})
	return w
}
