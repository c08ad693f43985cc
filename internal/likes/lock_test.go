package likes_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// sqlHoldLikeLock takes the advisory lock of one user's like of one post
// as the store names it (like:{user}:{post}).
const sqlHoldLikeLock = `SELECT pg_advisory_xact_lock(hashtextextended('like:' || $1::text || ':' || $2::text, 0))`

// holdLock holds layer 1's lock on userID's like of postID, under each
// strategy, until the returned release is called.
func (f *fixture) holdLock(t *testing.T, strategy likes.LockStrategy, userID, postID string) (release func()) {
	t.Helper()
	ctx := context.Background()
	if strategy == likes.LockAdvisory {
		tx, err := f.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, sqlHoldLikeLock, userID, postID); err != nil {
			t.Fatal(err)
		}
		return func() { _ = tx.Rollback(ctx) }
	}
	clients := redisx.Clients(f.addrs)
	t.Cleanup(func() { _ = redisx.Close(clients) })
	locker, err := lock.New(clients, lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	held, done, free := make(chan struct{}), make(chan error, 1), make(chan struct{})
	go func() {
		done <- locker.Do(ctx, "like:"+userID+":"+postID, func(context.Context) error {
			close(held)
			<-free
			return nil
		})
	}()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("hold the Redis lock: %v", err)
	}
	return func() {
		close(free)
		if err := <-done; err != nil {
			t.Errorf("the Redis lock's holder: %v", err)
		}
	}
}

// A like already where it is asked to be is answered from one read, with
// no lock and no write: while another request holds the lock on the
// like, a second like of a liked post answers at once, liked with its
// count, and the row is not written. A click that would change the like
// waits for the lock, LockWait at most, and is refused as busy with
// nothing written; the conflict counter names the lock.
func TestSet_AlreadyThereAnsweredWithoutLock(t *testing.T) {
	for _, strategy := range []likes.LockStrategy{likes.LockAdvisory, likes.LockRedsync} {
		t.Run(string(strategy), func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			svc, m := f.serviceLocking(t, strategy, layers.Set{}, 4)
			users := f.users(t, 2)
			p := f.mustPost(t, svc, users[0])
			for _, u := range users {
				if _, err := svc.Set(ctx, u, p.ID, likes.Liked); err != nil {
					t.Fatal(err)
				}
			}
			release := f.holdLock(t, strategy, users[0], p.ID)
			defer release()

			start := time.Now()
			r, err := svc.Set(ctx, users[0], p.ID, likes.Liked)
			if err != nil || r.State != likes.Liked || r.LikeCount != 2 {
				t.Fatalf("like of a liked post = %+v, %v; want liked with count 2", r, err)
			}
			if waited := time.Since(start); waited >= likes.LockWait {
				t.Errorf("the like of a liked post took %s: it waited for the lock", waited)
			}

			_, err = svc.Set(ctx, users[0], p.ID, likes.Unliked)
			if problem.CodeOf(err) != problem.ResourceBusy {
				t.Fatalf("unlike while the lock is held = %v, want resource_busy", err)
			}
			if got := stoppedBy(t, m, likes.FlowLike, "lock"); got != 1 {
				t.Errorf("conflicts stopped by the lock = %v, want 1", got)
			}
			if v := f.count(t, `SELECT version::int FROM likes WHERE post_id = $1 AND user_id = $2 AND liked`, p.ID, users[0]); v != 1 {
				t.Errorf("like row at version %d, want 1: liked once, never written again", v)
			}
			if f.checkCounts(t, p.ID) != 2 {
				t.Error("want two liked rows")
			}
		})
	}
}

// Layer 1 in PostgreSQL, on its own: the version check is off, and two
// clicks that both want the like made race. The first pauses between its
// read and its write while the second comes: with the lock, the second
// waits in PostgreSQL, then reads what the first wrote and writes
// nothing; the like is counted once. With the lock off too (the second
// case: its statements left out of the batch) the second reads the like
// unliked before the first writes, and both write it and count it: the
// failure the lock prevents.
func TestSet_AdvisoryLockSerialisesClicks(t *testing.T) {
	tests := []struct {
		name      string
		on        layers.Set
		wantCount int
	}{
		{"Locked", layers.Off(layers.Version), 1},
		{"LockOff", layers.Off(layers.Lock, layers.Version), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			setup, _ := f.service(t, layers.Set{}, 4)
			users := f.users(t, 1)
			p := f.mustPost(t, setup, users[0])
			// A row that exists, unliked, so both writes are updates.
			for _, want := range []likes.State{likes.Liked, likes.Unliked} {
				if _, err := setup.Set(ctx, users[0], p.ID, want); err != nil {
					t.Fatal(err)
				}
			}
			var probe layers.Probe
			read := make(chan struct{})
			second := make(chan error, 1)
			rows := &pausing{LikeRows: variants.Likes(f.store, tt.on, &probe)}
			svc, _ := f.serviceOn(t, likes.LockAdvisory, rows, tt.on, 4)
			rows.before = []func(){
				// The first click, read and about to write: the second
				// comes.
				func() {
					go func() {
						_, err := svc.Set(ctx, users[0], p.ID, likes.Liked)
						second <- err
					}()
					if tt.on.Takes(layers.Lock) {
						<-read
						return
					}
					waitFor(t, "the second click to wait for the lock", func() bool {
						return f.count(t, `SELECT count(*)::int FROM pg_locks
							WHERE locktype = 'advisory' AND NOT granted
							AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) == 1
					})
				},
				// The second click, read (with the lock: after the first's
				// commit).
				func() { close(read) },
			}
			if _, err := svc.Set(ctx, users[0], p.ID, likes.Liked); err != nil {
				t.Fatalf("first click: %v", err)
			}
			if err := <-second; err != nil {
				t.Fatalf("second click: %v", err)
			}
			if n := f.count(t, `SELECT sum(n)::int FROM post_like_shards WHERE post_id = $1`, p.ID); n != tt.wantCount {
				t.Errorf("count = %d, want %d (one liked row)", n, tt.wantCount)
			}
			if probe.Asked(layers.Lock) != tt.on.Takes(layers.Lock) {
				t.Errorf("the lock taken off: %v, want %v", probe.Asked(layers.Lock), tt.on.Takes(layers.Lock))
			}
		})
	}
}

// pausing are like rows that run before[i] when the i-th move is queued,
// between that click's read and its write.
type pausing struct {
	likes.LikeRows
	before []func()
	moves  atomic.Int64
}

func (p *pausing) QueueMove(b *pgx.Batch, r *likes.LikeRead, now time.Time, change likes.Change) (*likes.LikeMove, error) {
	if i := int(p.moves.Add(1)) - 1; i < len(p.before) {
		p.before[i]()
	}
	return p.LikeRows.QueueMove(b, r, now, change)
}

// A like of a post that does not exist is ErrNotFound from each way of
// reading and writing it, under each lock, and nothing is written.
func TestStore_NoSuchPost(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	users := f.users(t, 1)
	missing := "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	if _, _, _, err := f.store.Look(ctx, missing, users[0], likes.SetTo(likes.Liked)); !errors.Is(err, likes.ErrNotFound) {
		t.Errorf("Look = %v, want ErrNotFound", err)
	}
	if _, _, _, err := f.move(t, f.store, missing, users[0], likes.SetTo(likes.Liked), nil); !errors.Is(err, likes.ErrNotFound) {
		t.Errorf("QueueRead and QueueMove = %v, want ErrNotFound", err)
	}
	for _, strategy := range []likes.LockStrategy{likes.LockAdvisory, likes.LockRedsync} {
		for _, on := range []layers.Set{{}, layers.Off(layers.State)} {
			svc, _ := f.serviceLocking(t, strategy, on, 4)
			if _, err := svc.Set(ctx, users[0], missing, likes.Liked); !errors.Is(err, likes.ErrNotFound) {
				t.Errorf("Set with the %s lock, %s = %v, want ErrNotFound", strategy, on, err)
			}
		}
	}
	if n := f.count(t, `SELECT count(*)::int FROM likes`); n != 0 {
		t.Errorf("%d like rows written for no post", n)
	}
}
