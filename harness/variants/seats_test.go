package variants_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/seats"
)

// TestHolds_EditTheProductionStatements: each variant of the seat flows'
// writes cuts its layer's condition out of the statement production
// queues, and leaves the other layer's in, so a rename of the production
// SQL that the edits no longer match fails here rather than as a row of
// the ablation matrix that switches nothing.
func TestHolds_EditTheProductionStatements(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	h := seats.Hold{ID: "h", EventID: "e", UserID: "u", Seats: []string{"A1"}, Status: seats.Active, Version: 3, ExpiresAt: now.Add(time.Minute)}
	read := []seats.Seat{{Label: "A1", Status: seats.Available, Version: 7}}
	store := seats.NewStore(nil)
	queued := func(rows seats.HoldRows) (hold, confirm, release string) {
		t.Helper()
		b := &pgx.Batch{}
		if err := rows.QueueHoldSeats(b, h, read, seats.CheckAvailable); err != nil {
			t.Fatal(err)
		}
		if _, _, err := rows.QueueConfirm(context.Background(), b, h, "b", now, seats.Confirm(now)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := rows.QueueRelease(b, h, now, seats.Release(now)); err != nil {
			t.Fatal(err)
		}
		// The seats' write, the confirm, its event, the release.
		return b.QueuedQueries[0].SQL, b.QueuedQueries[1].SQL, b.QueuedQueries[3].SQL
	}
	const (
		seatState   = "s.status = 'available'"
		seatVersion = "s.version = r.version"
		confirmAt   = "version = $6"
		confirmSeat = "AND seats.hold_id = moved.id"
		releaseAt   = "version = $3"
	)
	for _, tt := range []struct {
		off          layers.Set
		state, versn bool // the conditions left in
	}{
		{layers.Set{}, true, true},
		{layers.Off(layers.State), false, true},
		{layers.Off(layers.Version), true, false},
		{layers.Off(layers.State, layers.Version), false, false},
	} {
		var probe layers.Probe
		hold, confirm, release := queued(variants.Holds(store, tt.off, &probe))
		for _, c := range []struct {
			sql, cond string
			want      bool
		}{
			{hold, seatState, tt.state}, {hold, seatVersion, tt.versn},
			{confirm, confirmAt, tt.versn}, {confirm, confirmSeat, tt.versn}, {release, releaseAt, tt.versn},
		} {
			if got := strings.Contains(c.sql, c.cond); got != c.want {
				t.Errorf("%s: %q in the statement: %v, want %v\n%s", tt.off, c.cond, got, c.want, c.sql)
			}
		}
		for _, l := range tt.off.Taken() {
			if !probe.Asked(l) {
				t.Errorf("%s: the probe was not told that %s was taken off", tt.off, l)
			}
		}
	}
}

// TestHolds_UnlockedQueuesNoLock: without layer 1 a hold's transaction
// queues none of its locks; with it, the caps' lock always and the seats'
// with the advisory strategy.
func TestHolds_UnlockedQueuesNoLock(t *testing.T) {
	h := seats.Hold{ID: "h", EventID: "e", UserID: "u", Seats: []string{"A1", "A2"}}
	for _, tt := range []struct {
		off  layers.Set
		lock seats.LockStrategy
		want int
	}{
		{layers.Set{}, seats.LockAdvisory, 3}, // the bound on waits, the caps', the seats'
		{layers.Set{}, seats.LockRedsync, 2},
		{layers.Off(layers.Lock), seats.LockAdvisory, 0},
	} {
		var probe layers.Probe
		b := &pgx.Batch{}
		variants.Holds(seats.NewStore(nil), tt.off, &probe).QueueLocks(b, h, tt.lock)
		if n := len(b.QueuedQueries); n != tt.want {
			t.Errorf("%s, %s: %d statements queued, want %d", tt.off, tt.lock, n, tt.want)
		}
		if tt.off.Takes(layers.Lock) != probe.Asked(layers.Lock) {
			t.Errorf("%s: the probe was told %v", tt.off, probe.Asked(layers.Lock))
		}
	}
}

// TestSections: the seat locks of a hold, in seat order, are taken as one
// lock per row, nested, in row order; other keys as they are.
func TestSections(t *testing.T) {
	var taken []string
	l := variants.Sections{Locker: recorder{taken: &taken}}
	f := layers.Flow{Locker: l}
	keys := []string{"seat:e:A1", "seat:e:A2", "seat:e:B1", "seat:e:B7"}
	if err := f.LockAll(context.Background(), keys, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := f.Lock(context.Background(), "hold:h", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(taken, " "), "section:e:A section:e:B hold:h"; got != want {
		t.Errorf("locks taken %q, want %q", got, want)
	}
}

// recorder is a Locker that records the keys it is asked for.
type recorder struct{ taken *[]string }

func (r recorder) Do(ctx context.Context, key string, fn func(context.Context) error) error {
	*r.taken = append(*r.taken, key)
	return fn(ctx)
}
