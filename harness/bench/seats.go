package bench

// `shop bench seats` measures holds of random 1–4-seat sets by -clients
// clients (64 by default), each a user of its own, on two events:
//
//   - spread: the largest seat map the contract allows, 26 rows of 50
//     (1,300 seats), so holds rarely overlap;
//   - hot: a 20-seat front row that every client wants.
//
// Each is run for the raw SQL baseline (one transaction: the conditional
// update of the seats and the insert of the hold; no HTTP, no lock, no
// idempotency key) and for the whole layered flow through HTTP (bearer
// token, Idempotency-Key, the seat lock, the state rule, the
// version-checked write, the constraints) with each lock strategy of
// SHOP_SEAT_LOCK: redsync (a Redis lock per seat, in seat order),
// advisory (pg_advisory_xact_lock per seat inside the transaction) and
// none; and with the alternative of a redsync lock per section (row) of
// the event, section, which the configuration does not offer: the bench
// runs the redsync strategy with its seat locks regrouped by row
// (variants.Sections).
//
// One unit of work is a hold and, when it was granted, its release, so
// the seats keep coming back: a client that got its seats gives them back
// at once (the raw baseline in a second transaction, the layered flow
// with DELETE /v1/holds/{id}). holds/s counts the holds granted in the
// window; p50 and p99 are of the whole unit; conflicts/s counts the
// refusals because a seat was taken (seat_unavailable, or the baseline's
// update reaching fewer seats than asked). After each scenario the bench
// checks its event: no seat in two active holds, and the seats' states
// equal the hold rows; it exits non-zero if one is not.

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/docblock"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/seats"
)

// seatShape is one of the two events of the bench.
type seatShape struct {
	name         string
	rows, perRow int
}

var seatShapes = []seatShape{{"spread", seats.MaxRows, seats.MaxSeatsPerRow}, {"hot", 1, 20}}

// seatStrategy is one way of locking seats that the bench measures: a
// value of SHOP_SEAT_LOCK, or the lock per section, which the service
// does not offer: the Redis lock with the seat locks of a hold regrouped
// by row (variants.Sections).
type seatStrategy struct {
	name     string             // the scenarios' prefix
	lock     seats.LockStrategy // SHOP_SEAT_LOCK
	variants app.Variants
}

// seatStrategies are the lock strategies measured, in order.
var seatStrategies = []seatStrategy{
	{name: "redsync", lock: seats.LockRedsync},
	{name: "section", lock: seats.LockRedsync, variants: app.Variants{
		Locker: func(l layers.Locker) layers.Locker { return variants.Sections{Locker: l} }}},
	{name: "advisory", lock: seats.LockAdvisory},
	{name: "none", lock: seats.LockNone},
}

func benchSeats(ctx context.Context, o benchOptions, logger *slog.Logger) (err error) {
	db, pool, err := openScratch(ctx, o, logger)
	if err != nil {
		return err
	}
	defer func() { pool.Close(); err = errors.Join(err, db.drop()) }()
	userIDs, tokens, err := seedUsers(ctx, pool, o.clients)
	if err != nil {
		return err
	}
	var results []result
	var events []string
	run := func(scs []scenario) error {
		r, err := runScenarios(ctx, pool, o, scs, logger)
		results = append(results, r...)
		return err
	}
	newEvent := func(sh seatShape) (string, error) {
		id, err := seedEvent(ctx, pool, sh)
		events = append(events, id)
		return id, err
	}
	// The baselines first, on events of their own.
	for _, sh := range seatShapes {
		id, err := newEvent(sh)
		if err != nil {
			return err
		}
		raw := rawSeatFlow{pool: pool, users: userIDs, event: id, shape: sh}
		if err := run([]scenario{{name: "raw/" + sh.name, order: raw.hold}}); err != nil {
			return err
		}
	}
	locks := map[string]string{}
	for _, strategy := range seatStrategies {
		o.seatLock = string(strategy.lock)
		svc, err := startServiceWith(ctx, o, db.url, "", tokens, app.Deps{Variants: strategy.variants})
		if err != nil {
			return err
		}
		var scs []scenario
		for _, sh := range seatShapes {
			id, err := newEvent(sh)
			if err != nil {
				svc.stop()
				return err
			}
			f := layeredSeatFlow{svc: svc, event: id, shape: sh}
			scs = append(scs, scenario{name: strategy.name + "/" + sh.name, order: f.hold, layered: true})
		}
		err = run(scs)
		locks[strategy.name] = svc.lockOutcomes()
		svc.stop()
		if err != nil {
			return err
		}
	}
	broken := 0
	for _, id := range events {
		n, err := seatViolations(ctx, pool, id)
		if err != nil {
			return err
		}
		broken += n
	}
	var report strings.Builder
	printSeatsReport(&report, o, results, locks, broken)
	fmt.Fprint(os.Stdout, report.String())
	if err := o.doc.write(ctx, pool, o.redisAddrs, docblock.Block{Name: "benchmarks/seats", Rows: resultNames(results), Body: asMarkdown(report.String())}); err != nil {
		return err
	}
	if broken > 0 {
		return fmt.Errorf("bench seats: %d seats double held or disagreeing with their holds", broken)
	}
	return nil
}

// pickSeats picks 1–4 distinct seats of the shape.
func pickSeats(sh seatShape) []string {
	n := 1 + rand.IntN(4)
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		l := seats.Label(rand.IntN(sh.rows), 1+rand.IntN(sh.perRow))
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// failure keys of a hold that was not granted.
const (
	failConflict = "conflict" // a seat was taken
	failBusy     = "busy"     // resource_busy: a lock, or the seats kept changing
)

// rawSeatFlow is the baseline: a hold in one transaction, the
// conditional update of the seats and the insert of the hold; the
// release in a second.
type rawSeatFlow struct {
	pool  *pgxpool.Pool
	users []string
	event string
	shape seatShape
}

const (
	sqlRawHoldSeats = `UPDATE seats SET status = 'held', hold_id = $3, version = version + 1
		WHERE event_id = $1 AND seat = ANY($2) AND status = 'available'`
	sqlRawInsertHold = `INSERT INTO holds (id, event_id, user_id, seats, status, expires_at, version, created_at, updated_at)
		VALUES ($1, $2, $3, $4, 'active', $5, 1, $6, $6)`
	sqlRawRelease = `WITH h AS (UPDATE holds SET status = 'released', version = version + 1 WHERE id = $1 RETURNING id)
		UPDATE seats SET status = 'available', hold_id = NULL, version = version + 1 FROM h WHERE seats.hold_id = h.id`
)

// errRawTaken rolls the baseline's hold back when a seat was taken.
var errRawTaken = errors.New("a seat is taken")

// hold holds the seats named by key ("A1,A2", see seatKey), or 1–4
// random seats without one, then releases them.
func (f rawSeatFlow) hold(ctx context.Context, client int, key string) string {
	return runSteps(ctx, client, withHoldID(key), f.take, f.release)
}

// take is the hold: the seats named by key (seatKey) under the hold id it
// names.
func (f rawSeatFlow) take(ctx context.Context, client int, key string) string {
	want, id := parseSeatKey(key)
	if len(want) == 0 {
		want = pickSeats(f.shape)
		seats.SortSeats(want)
	}
	now := time.Now().UTC()
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sqlRawHoldSeats, f.event, want, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(want)) {
			return errRawTaken
		}
		_, err = tx.Exec(ctx, sqlRawInsertHold, id, f.event, f.users[client], want, now.Add(seats.DefaultHoldTTL), now)
		return err
	})
	switch {
	case errors.Is(err, errRawTaken):
		return failConflict
	case err != nil && ctx.Err() != nil:
		return "cancelled"
	case err != nil:
		return "sql error"
	}
	return ""
}

// release ends the hold that key names.
func (f rawSeatFlow) release(ctx context.Context, _ int, key string) string {
	_, id := parseSeatKey(key)
	if _, err := f.pool.Exec(ctx, sqlRawRelease, id); err != nil {
		return "release"
	}
	return ""
}

// layeredSeatFlow is the whole flow through HTTP.
type layeredSeatFlow struct {
	svc   *service
	event string
	shape seatShape
}

// hold holds the seats named by key ("A1,A2"), or 1–4 random seats
// without one, then releases them.
func (f layeredSeatFlow) hold(ctx context.Context, client int, key string) string {
	want, _ := parseSeatKey(key)
	if len(want) == 0 {
		want = pickSeats(f.shape)
	}
	body, _ := json.Marshal(map[string]any{"seats": want})
	a := f.svc.post(ctx, f.svc.tokens[client], "/v1/events/"+f.event+"/holds", string(body), crand.Text())
	if failure := a.failure(); failure != "" {
		switch {
		case a.status == http.StatusConflict && strings.Contains(string(a.body), `"seat_unavailable"`):
			return failConflict
		case a.status == http.StatusConflict && strings.Contains(string(a.body), `"resource_busy"`):
			return failBusy
		}
		return failure
	}
	var h struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(a.body, &h); err != nil {
		return "decode"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, f.svc.base+"/v1/holds/"+h.ID, nil)
	if err != nil {
		return "request"
	}
	req.Header.Set("Authorization", "Bearer "+f.svc.tokens[client])
	if r := f.svc.do(ctx, req); r.status != http.StatusOK {
		return "release"
	}
	return ""
}

// seedEvent creates an event of the shape, every seat available.
func seedEvent(ctx context.Context, pool *pgxpool.Pool, sh seatShape) (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	ev := seats.Event{ID: id.String(), Name: "bench " + sh.name, Rows: sh.rows, SeatsPerRow: sh.perRow, CreatedAt: time.Now().UTC()}
	if err := seats.NewStore(pool).CreateEvent(ctx, ev); err != nil {
		return "", err
	}
	return ev.ID, nil
}

// sqlSeatViolations counts, on one event, the active holds beyond the
// first on a seat, and the held seats whose hold is not active.
const sqlSeatViolations = `SELECT
	(SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM seats s JOIN holds h ON h.id = s.hold_id
		WHERE s.event_id = $1 AND h.status = 'active' GROUP BY s.seat) x)::int
	+ (SELECT count(*) FROM seats s LEFT JOIN holds h ON h.id = s.hold_id
		WHERE s.event_id = $1 AND s.status = 'held' AND h.status IS DISTINCT FROM 'active')::int
	+ (SELECT count(*) FROM seats s WHERE s.event_id = $1 AND s.status = 'available' AND s.hold_id IS NOT NULL)::int`

func seatViolations(ctx context.Context, pool *pgxpool.Pool, event string) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, sqlSeatViolations, event).Scan(&n); err != nil {
		return 0, fmt.Errorf("check seats: %w", err)
	}
	return n, nil
}

// printSeatsReport writes the table, then each strategy against the
// baseline and the goal.
func printSeatsReport(w io.Writer, o benchOptions, results []result, locks map[string]string, broken int) {
	fmt.Fprintf(w, "\nshop bench seats: %d clients, random 1–4-seat holds, each released when granted; spread = %d×%d seats, hot = a 20-seat row; %s measured after %s warmup per scenario; %d CPUs, GOMAXPROCS %d, %s\n\n",
		o.clients, seats.MaxRows, seats.MaxSeatsPerRow, o.duration, o.warmup, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Fprintln(w, "| scenario | holds/s | p50 | p99 | conflicts/s | busy/s | other errors | vs raw |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|---:|")
	byName := map[string]result{}
	for _, r := range results {
		byName[r.name] = r
	}
	for _, r := range results {
		shape := r.name[strings.Index(r.name, "/")+1:]
		ratio := "—"
		if base := byName["raw/"+shape]; !strings.HasPrefix(r.name, "raw/") && base.orders > 0 {
			ratio = fmt.Sprintf("%.2f", r.rate()/base.rate())
		}
		other := map[string]int{}
		for k, n := range r.errors {
			if k != failConflict && k != failBusy {
				other[k] = n
			}
		}
		secs := r.window.Seconds()
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %.0f | %.0f | %s | %s |\n", r.name, r.rate(), millis(r.p50), millis(r.p99),
			float64(r.errors[failConflict])/secs, float64(r.errors[failBusy])/secs, countSummary(other), ratio)
	}
	fmt.Fprintln(w)
	for _, strategy := range seatStrategies {
		for _, sh := range seatShapes {
			base, ours := byName["raw/"+sh.name], byName[strategy.name+"/"+sh.name]
			if base.orders == 0 {
				continue
			}
			ratio := ours.rate() / base.rate()
			fmt.Fprintf(w, "%-8s %-6s layered/raw = %.2f, p99 %s: goal (ratio >= %.1f, p99 < %s) %s\n", strategy.name, sh.name, ratio,
				millis(ours.p99), goalRatio, goalP99, verdict(ratio >= goalRatio && ours.p99 < goalP99 && ours.orders > 0))
		}
	}
	for _, strategy := range seatStrategies {
		fmt.Fprintf(w, "service lock (%s): %s\n", strategy.name, locks[strategy.name])
	}
	fmt.Fprintf(w, "seats double held or disagreeing with their holds: %d\n", broken)
}
