package bench

// Seat hold in the shoot-out: each operation holds 1–4 random seats of an
// event and, when the hold was granted, releases it at once, so the seats
// keep coming back (the unit of `shop bench seats`). Hot: a 20-seat row
// every client wants; spread: the largest seat map. A seat held by two
// holds at once is a double booking. Holds are released straight away,
// so the end state hides most of them: in flight, a trigger the bench
// adds counts every seat written held for one hold while another held it
// (seats.double_holds), whichever strategy wrote it. The write commits
// with the hold, so each one counted is a seat two clients were both
// told they held at once. After, the audit adds what seatViolations finds
// on the event.

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/seats"
)

const (
	sqlSeatsAddAuditColumn = `
		ALTER TABLE seats ADD COLUMN double_holds bigint NOT NULL DEFAULT 0;
		CREATE FUNCTION bench_count_double_holds() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			IF NEW.status = 'held' AND OLD.status <> 'available' AND NEW.hold_id IS DISTINCT FROM OLD.hold_id THEN
				NEW.double_holds := OLD.double_holds + 1;
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER bench_count_double_holds BEFORE UPDATE ON seats
			FOR EACH ROW EXECUTE FUNCTION bench_count_double_holds();`
	sqlSeatsRead          = `SELECT seat, status, version FROM seats WHERE event_id = $1 AND seat = ANY($2) ORDER BY seat`
	sqlSeatsReadForUpdate = sqlSeatsRead + ` FOR UPDATE`
	// The write of every baseline but the conditional one: the seats
	// taken whatever they are now.
	sqlSeatsTakeBlind = `UPDATE seats SET status = 'held', hold_id = $3, version = version + 1
		WHERE event_id = $1 AND seat = ANY($2)`
	// optimistic: each seat written only at the version read.
	sqlSeatTakeVersioned = `UPDATE seats SET status = 'held', hold_id = $3, version = version + 1
		WHERE event_id = $1 AND seat = $2 AND version = $4`
	// unique only: the hold's seats, which hold_seats_one_active_per_seat
	// admits once each while active.
	sqlHoldSeatsInsert  = `INSERT INTO hold_seats (hold_id, event_id, seat, active) SELECT $1, $2, s, true FROM unnest($3::text[]) AS s`
	sqlHoldSeatsRelease = `UPDATE hold_seats SET active = false WHERE hold_id = $1`
	sqlSeatsAudit       = `SELECT coalesce(sum(double_holds), 0)::int FROM seats WHERE event_id = $1`
)

var errSeatTaken = errors.New("a seat is not available")

func seatsFlow() flowSpec {
	base := func(how func(a *arena) seatTake) func(ctx context.Context, a *arena, shape string) (cell, error) {
		return seatCell(func(a *arena, ev string, sh seatShape) []orderFunc { return a.holdSeats(ev, sh, how(a)) })
	}
	return flowSpec{
		name:     "seats",
		title:    "Seat hold",
		unit:     "holds/s",
		done:     "seats held and released",
		tables:   []string{"events", "seats", "holds", "hold_seats", "idempotency_keys"},
		anomaly:  "double bookings: seats taken while held by another hold, or, if more, seats double held or disagreeing with their holds afterwards",
		inFlight: "seats written held for a hold while another hold held them (a trigger on seats, every strategy alike)",
		strategies: map[string]strategy{
			"naive": {how: "read the seats, check in Go that all are available, write them held, insert the hold",
				cell: base(func(*arena) seatTake { return takeSeatsNaive(sqlSeatsRead, false) })},
			"unique only": {how: "the naive hold, plus a hold_seats row per seat: hold_seats_one_active_per_seat admits one active hold per seat",
				cell: base(func(*arena) seatTake { return takeSeatsNaive(sqlSeatsRead, true) })},
			"optimistic": {how: "read the seats' versions, write each only at the version read; a seat that changed is a conflict (a retry would find it taken)",
				cell: base(func(*arena) seatTake { return takeSeatsOptimistic })},
			"row lock": {how: "SELECT … FOR UPDATE on the seats, in seat order, check, write",
				cell: base(func(*arena) seatTake { return takeSeatsNaive(sqlSeatsReadForUpdate, false) })},
			"advisory": {how: "pg_advisory_xact_lock per seat, in seat order, then the naive hold",
				cell: base(func(*arena) seatTake { return takeSeatsAdvisory })},
			"redsync only": {how: "the naive hold inside a Redlock per seat, taken in seat order, over the three nodes",
				cell: seatCell(func(a *arena, ev string, sh seatShape) []orderFunc {
					steps := a.holdSeats(ev, sh, takeSeatsNaive(sqlSeatsRead, false))
					hold := steps[0]
					steps[0] = func(ctx context.Context, client int, key string) string {
						want, _ := parseSeatKey(key)
						return underLocks(ctx, a, ev, want, func(ctx context.Context) string { return hold(ctx, client, key) })
					}
					return steps
				})},
			"conditional": {how: "one conditional UPDATE … WHERE status = 'available' over the seats, all or none (bench seats' raw baseline)",
				cell: seatCell(func(a *arena, ev string, sh seatShape) []orderFunc {
					f := rawSeatFlow{pool: a.pool, users: a.users, event: ev, shape: sh}
					return []orderFunc{f.take, f.release}
				})},
			"layered": {how: "POST /v1/events/{id}/holds through the service (its default seat lock), then DELETE /v1/holds/{id}",
				cell: seatCell(func(a *arena, ev string, sh seatShape) []orderFunc {
					return []orderFunc{layeredSeatFlow{svc: a.svc, event: ev, shape: sh}.hold}
				})},
		},
	}
}

// seatCell seeds an event of the case's shape (spread: -seat-rows rows)
// and audits it afterwards. Its unit is the steps op returns: a baseline's
// hold and its release, each a request of its own through HTTP as the
// layered flow's are (the layered flow's one step sends both).
func seatCell(op func(a *arena, event string, sh seatShape) []orderFunc) func(ctx context.Context, a *arena, shape string) (cell, error) {
	return func(ctx context.Context, a *arena, shape string) (cell, error) {
		sh := seatShapes[0]
		for _, s := range seatShapes {
			if s.name == shape {
				sh = s
			}
		}
		if shape == spread {
			sh.rows = a.o.seatRows
		}
		ev, err := seedEvent(ctx, a.pool, sh)
		if err != nil {
			return cell{}, err
		}
		audit := func(ctx context.Context) (audit, error) {
			var found audit
			if err := a.pool.QueryRow(ctx, sqlSeatsAudit, ev).Scan(&found.inFlight); err != nil {
				return audit{}, err
			}
			after, err := seatViolations(ctx, a.pool, ev)
			found.after = after
			return found, err
		}
		// Each hold's seats are picked before it is sent, and named by its
		// key with the hold's id (seatKey).
		pick := func(string) (string, string) {
			want := pickSeats(sh)
			seats.SortSeats(want)
			return withHoldID(joinSeats(want)), ""
		}
		steps := op(a, ev, sh)
		unit := func(ctx context.Context, client int, key string) string {
			return runSteps(ctx, client, key, steps...)
		}
		return cell{op: unit, steps: steps, pick: pick, told: newTold(), audit: audit}, nil
	}
}

// seatTake takes the seats for hold inside tx, or returns errSeatTaken.
type seatTake func(ctx context.Context, tx pgx.Tx, event, hold string, want []string) error

// holdSeats is one unit in two steps: a hold of the seats named by key
// (seatKey), or of 1–4 random seats without any, inserted and its seats
// taken with take in one transaction; then its release, in a second.
func (a *arena) holdSeats(event string, sh seatShape, take seatTake) []orderFunc {
	hold := func(ctx context.Context, client int, key string) string {
		want, id := parseSeatKey(key)
		if len(want) == 0 {
			want = pickSeats(sh)
			seats.SortSeats(want)
		}
		now := time.Now().UTC()
		err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			// The hold first: hold_seats rows (unique only) refer to it.
			if _, err := tx.Exec(ctx, sqlRawInsertHold, id, event, a.users[client], want, now.Add(seats.DefaultHoldTTL), now); err != nil {
				return err
			}
			return take(ctx, tx, event, id, want)
		})
		switch {
		case errors.Is(err, errSeatTaken), errors.Is(err, errVersionConflict), postgres.SQLState(err) == "23505":
			return failConflict
		case err != nil:
			return failureOf(ctx, err)
		}
		return ""
	}
	release := func(ctx context.Context, _ int, key string) string {
		_, id := parseSeatKey(key)
		err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sqlHoldSeatsRelease, id); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sqlRawRelease, id)
			return err
		})
		if err != nil {
			return "release"
		}
		return ""
	}
	return []orderFunc{hold, release}
}

// takeSeatsNaive reads the seats with readSQL (which may lock them),
// checks in Go that all are available, and writes them held; with
// uniqueRows it also inserts the hold's hold_seats rows.
func takeSeatsNaive(readSQL string, uniqueRows bool) seatTake {
	return func(ctx context.Context, tx pgx.Tx, event, hold string, want []string) error {
		if _, err := readSeats(ctx, tx, readSQL, event, want); err != nil {
			return err
		}
		if uniqueRows {
			if _, err := tx.Exec(ctx, sqlHoldSeatsInsert, hold, event, want); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, sqlSeatsTakeBlind, event, want, hold)
		return err
	}
}

// readSeats reads the seats and returns their versions by seat, or
// errSeatTaken if one is not available.
func readSeats(ctx context.Context, tx pgx.Tx, readSQL, event string, want []string) (map[string]int64, error) {
	rows, err := tx.Query(ctx, readSQL, event, want)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	versions := map[string]int64{}
	for rows.Next() {
		var seat, status string
		var version int64
		if err := rows.Scan(&seat, &status, &version); err != nil {
			return nil, err
		}
		if status != "available" {
			return nil, errSeatTaken
		}
		versions[seat] = version
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(versions) != len(want) {
		return nil, errSeatTaken
	}
	return versions, nil
}

func takeSeatsAdvisory(ctx context.Context, tx pgx.Tx, event, hold string, want []string) error {
	for _, s := range want {
		if _, err := tx.Exec(ctx, sqlAdvisoryLock, "seat:"+event+":"+s); err != nil {
			return err
		}
	}
	return takeSeatsNaive(sqlSeatsRead, false)(ctx, tx, event, hold, want)
}

// takeSeatsOptimistic writes each seat only at the version read; a seat
// that changed meanwhile rolls the hold back as a conflict.
func takeSeatsOptimistic(ctx context.Context, tx pgx.Tx, event, hold string, want []string) error {
	versions, err := readSeats(ctx, tx, sqlSeatsRead, event, want)
	if err != nil {
		return err
	}
	for _, s := range want {
		tag, err := tx.Exec(ctx, sqlSeatTakeVersioned, event, s, hold, versions[s])
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return errVersionConflict
		}
	}
	return nil
}

// underLocks runs fn under a Redlock on each seat, taken in seat order.
func underLocks(ctx context.Context, a *arena, event string, want []string, fn func(ctx context.Context) string) string {
	if len(want) == 0 {
		return fn(ctx)
	}
	return underLock(ctx, a, "seat:"+event+":"+want[0], func(ctx context.Context) string {
		return underLocks(ctx, a, event, want[1:], fn)
	})
}

func joinSeats(s []string) string { return strings.Join(s, ",") }

// A seat key names a hold's seats and its id: "A1,A2/0193…". The
// client picks both, so that a unit's two steps, each a request of its
// own, name the same hold; the layered flow sends the seats and lets the
// service pick the id.
func withHoldID(seatList string) string {
	if strings.Contains(seatList, "/") {
		return seatList
	}
	id, err := uuid.NewV7()
	if err != nil {
		return seatList // no id: the hold's insert refuses it
	}
	return seatList + "/" + id.String()
}

// parseSeatKey splits a seat key into its seats (none for "") and its
// hold id.
func parseSeatKey(key string) ([]string, string) {
	list, id, _ := strings.Cut(key, "/")
	if list == "" {
		return nil, id
	}
	return strings.Split(list, ","), id
}

// runSteps runs a unit's steps in order, and stops at the first that
// fails.
func runSteps(ctx context.Context, client int, key string, steps ...orderFunc) string {
	for _, step := range steps {
		if failure := step(ctx, client, key); failure != "" {
			return failure
		}
	}
	return ""
}
