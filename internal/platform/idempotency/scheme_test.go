package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/internal/platform/keyscheme"
	"github.com/shop-example/shop/internal/platform/postgres"
)

var (
	scheme1     = keyscheme.Scheme{Version: 1}
	scheme2Plus = keyscheme.Scheme{Version: 2, Transition: true}
	scheme2     = keyscheme.Scheme{Version: 2}
	scheme2Deaf = keyscheme.Scheme{Version: 2, Blind: true}
)

// Two replicas on one database, each on its scheme: a request sent to one
// and then, again, to the other is answered by the second from the first's
// record, with no second effect, in either order; and copies sent to both
// at once make one effect. Where one cannot see the other's records (a
// scheme-2 replica with the transition rules off, or one that skipped the
// transition beside a scheme-1 replica) the copy runs again: those pairs
// must break, so the rules are what holds the others.
func TestSchemes_ReplicasSideBySide(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		a, b   keyscheme.Scheme
		breaks bool
	}{
		{"1 beside 2+1", scheme1, scheme2Plus, false}, // the rollout
		{"2+1 beside 2", scheme2Plus, scheme2, false}, // the clean-up
		{"1 beside 2", scheme1, scheme2, true},        // the clean-up while a scheme-1 replica runs
		{"1 beside 2, rules off", scheme1, scheme2Deaf, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newHarness(t, Options{Scheme: tc.a})
			b := a.beside(t, Options{Scheme: tc.b})
			const keys = 4
			doubled, sent := 0, 0
			for i := range keys {
				for _, act := range []string{"", "batched", "two_phase"} {
					per := 1 // effects of one run
					if act == "two_phase" {
						per = 2 // one in each phase
					}
					for order, pair := range [][2]*harness{{a, b}, {b, a}} {
						key := fmt.Sprintf("k%d-%s-%d", i, act, order)
						r := request{path: atomicPath, key: key, act: act, body: `{"quantity":1}`}
						first := pair[0].mustSend(t, r)
						if first.status != http.StatusCreated {
							t.Fatalf("first %s: got %d %s, want 201", key, first.status, first.body)
						}
						again := pair[1].mustSend(t, r)
						if again.status != http.StatusCreated {
							t.Fatalf("again %s: got %d %s, want 201", key, again.status, again.body)
						}
						sent++
						switch n := a.effects(t, "alice", key); {
						case n == per && again.replayed() && string(again.body) == string(first.body):
						case n == per:
							t.Fatalf("%s: one run, but the copy was answered %s, not the first answer %s", key, again.body, first.body)
						case tc.breaks && n == 2*per:
							doubled++
						default:
							t.Fatalf("%s: %d effects of one request, want %d", key, n, per)
						}
					}
				}
			}
			if tc.breaks {
				// In one order at least, every copy runs again.
				if doubled < sent/2 {
					t.Fatalf("%d of %d requests ran twice, want at least half: the replicas see each other's records", doubled, sent)
				}
				return
			}
			// Copies at once, half to each replica.
			for i := range keys {
				key := fmt.Sprintf("race%d", i)
				r := request{path: atomicPath, key: key, body: `{"quantity":1}`}
				replies := raceOn(t, []*harness{a, b}, 8, r)
				created := 0
				for _, rep := range replies {
					switch {
					case rep.status == http.StatusCreated:
						created++
					case rep.code() == "request_in_progress":
					default:
						t.Fatalf("%s: got %d %s", key, rep.status, rep.body)
					}
				}
				if n := a.effects(t, "alice", key); n != 1 || created == 0 {
					t.Fatalf("%s: %d effects, %d answered 201; want one effect", key, n, created)
				}
			}
		})
	}
}

// A request that met a record of the other scheme is counted under the
// record's scheme, by the replica that met it.
func TestSchemes_CrossSchemeCounted(t *testing.T) {
	t.Parallel()
	a := newHarness(t, Options{Scheme: scheme1})
	b := a.beside(t, Options{Scheme: scheme2Plus})
	for i := range 3 {
		r := request{path: atomicPath, key: fmt.Sprintf("c%d", i), body: `{}`}
		a.mustSend(t, r)
		if rep := b.mustSend(t, r); !rep.replayed() {
			t.Fatalf("not replayed: %d %s", rep.status, rep.body)
		}
	}
	r := request{path: atomicPath, key: "from2", body: `{}`}
	b.mustSend(t, r)
	if rep := a.mustSend(t, r); !rep.replayed() {
		t.Fatalf("not replayed: %d %s", rep.status, rep.body)
	}
	if got := counter(t, b, "shop_idempotency_cross_scheme_total", "flow", atomicFlow, "scheme", "1"); got != 3 {
		t.Fatalf("scheme 2+1 counted %v requests meeting a scheme-1 record, want 3", got)
	}
	if got := counter(t, a, "shop_idempotency_cross_scheme_total", "flow", atomicFlow, "scheme", "2"); got != 1 {
		t.Fatalf("scheme 1 counted %v requests meeting a scheme-2 record, want 1", got)
	}
}

// Clean scheme 2 scopes a key to its operation: the same key on another
// route is another request, where scheme 1 (and the transition) refuse it
// as reused.
func TestSchemes_KeyScopedToItsOperation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		scheme keyscheme.Scheme
		want   int
		names  string
	}{
		{scheme1, http.StatusUnprocessableEntity, `["step"]`},
		{scheme2Plus, http.StatusUnprocessableEntity, `["step"]`},
		{scheme2, http.StatusCreated, `["v2·atomic_thing·step" "v2·other_thing·step"]`},
	} {
		t.Run(tc.scheme.String(), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Options{Scheme: tc.scheme})
			h.mustSend(t, request{path: atomicPath, key: "step", body: `{}`})
			if rep := h.mustSend(t, request{path: "/v1/other/1", key: "step", body: `{}`}); rep.status != tc.want {
				t.Fatalf("the key on another operation: got %d %s, want %d", rep.status, rep.body, tc.want)
			}
			var names []string
			rows, err := h.db.Query(context.Background(), `SELECT key FROM idempotency_keys ORDER BY key`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var n string
				if err := rows.Scan(&n); err != nil {
					t.Fatal(err)
				}
				names = append(names, n)
			}
			if got := fmt.Sprintf("%q", names); got != tc.names {
				t.Fatalf("records %s, want %s", got, tc.names)
			}
		})
	}
}

// A replica in transition whose claim rolled back (a 409 out_of_stock
// after the claim) stores that answer in a statement of its own. If a copy
// of the request ran meanwhile on a cleaned-up replica, under the other
// name, that copy's record is the key's: the answer must not become a
// second record, or each replica would replay a different one.
func TestSchemes_StoredAnswerMeetsTheOtherName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clean := newHarness(t, Options{Scheme: scheme2})
	// The replica in transition stores its answers through a pool of one
	// connection, held by the test until the copy has run.
	one, err := postgres.Open(ctx, clean.db.Config().ConnString(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.Close)
	transition := harnessOn(t, one, clean.flowDB, Options{Scheme: scheme2Plus})
	held, err := one.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := request{path: atomicPath, key: "k", body: `{"quantity":1}`}
	refused := r
	refused.act = "out_of_stock"
	answered := make(chan reply, 1)
	go func() { answered <- transition.mustSend(t, refused) }()
	// Its claim was made and rolled back (the key's advisory lock is free
	// again), and its answer waits for the held connection.
	rolledBack := func() bool {
		if counter(t, transition, "shop_idempotency_requests_total", "outcome", outcomeClaimed) == 0 {
			return false
		}
		var locks int
		if err := clean.db.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&locks); err != nil {
			t.Fatal(err)
		}
		return locks == 0
	}
	for deadline := time.Now().Add(testDeadline); !rolledBack(); {
		if time.Now().After(deadline) {
			t.Fatal("the refused request's claim never rolled back")
		}
		time.Sleep(time.Millisecond)
	}
	if first := clean.mustSend(t, r); first.status != http.StatusCreated {
		t.Fatalf("the copy on the cleaned-up replica: %d %s", first.status, first.body)
	}
	held.Release()
	<-answered
	onClean, onTransition := clean.mustSend(t, r), transition.mustSend(t, r)
	if onClean.status != http.StatusCreated || onTransition.status != http.StatusCreated {
		t.Errorf("retries replay %d (cleaned up) and %d (in transition), want the 201 the copy made; records %q",
			onClean.status, onTransition.status, names(t, clean))
	}
}

// A claim taken over, rolled back and made again may land under the other
// name (the first owner released the one it had): the request completes and
// releases the record under the name it has now, not the one it first had.
func TestSchemes_ReclaimKeepsTheKeysName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	transition := newHarness(t, Options{Scheme: scheme2Plus})
	clean := transition.beside(t, Options{Scheme: scheme2})
	fp := fingerprint(http.MethodPost, atomicPath, []byte(`{}`))
	t0 := time.Now().UTC().Truncate(time.Microsecond)
	record := func(s *Store, at time.Time) *Record {
		return &Record{store: s, flow: atomicFlow, principal: "p", key: "k", names: s.scheme.Record(atomicFlow, "k"),
			fp: fp, owner: uuid.New(), at: at}
	}
	// B, in transition, commits its first phase under "k", and stalls.
	b := record(transition.store, t0)
	if err := postgres.InTx(ctx, transition.flowDB, func(tx pgx.Tx) error { return b.Claim(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
	// A, cleaned up, takes the expired claim over; its try rolls back.
	a := record(clean.store, t0.Add(DefaultLease+time.Second))
	again := errors.New("a version conflict: try again")
	if err := postgres.InTx(ctx, clean.flowDB, func(tx pgx.Tx) error {
		if err := a.Claim(ctx, tx); err != nil {
			return err
		}
		return again
	}); !errors.Is(err, again) {
		t.Fatal(err)
	}
	// B gives up and releases its claim, still its own on the row.
	if err := transition.store.release(ctx, "p", b.name, b.owner); err != nil {
		t.Fatal(err)
	}
	// A's second try claims again, now under its own scheme's name.
	var stored bool
	if err := postgres.InTx(ctx, clean.flowDB, func(tx pgx.Tx) error {
		if err := a.Claim(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlEffect, "p", "k", 1); err != nil {
			return err
		}
		var err error
		stored, err = a.Complete(ctx, tx, Answer{Status: http.StatusCreated, Body: "ok"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !stored {
		t.Fatalf("the second try's answer was not stored; records %q", names(t, clean))
	}
	// A retry after the lease is answered from that record: no second run.
	d := record(transition.store, t0.Add(3*DefaultLease))
	err := postgres.InTx(ctx, transition.flowDB, func(tx pgx.Tx) error {
		if err := d.Claim(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sqlEffect, "p", "k", 2)
		return err
	})
	var refusal *Refusal
	if !errors.As(err, &refusal) || refusal.prev == nil || refusal.prev.response == nil {
		t.Errorf("the retry: %v, want the stored answer replayed", err)
	}
	if n := transition.effects(t, "p", "k"); n != 1 {
		t.Errorf("%d effects of one request, want 1; records %q", n, names(t, clean))
	}
}

// names are the key names in h's database with their state.
func names(t *testing.T, h *harness) []string {
	t.Helper()
	rows, err := h.db.Query(context.Background(),
		`SELECT key || ':' || coalesce(status_code::text, 'claimed') FROM idempotency_keys ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A two-phase request that took over a scheme-1 record meets it again in
// its second phase: it is counted once.
func TestSchemes_CrossSchemeCountedOncePerRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old := newHarness(t, Options{Scheme: scheme1})
	clean := old.beside(t, Options{Scheme: scheme2})
	fp := fingerprint(http.MethodPost, atomicPath, []byte(`{}`))
	t0 := time.Now().UTC().Truncate(time.Microsecond)
	record := func(s *Store, at time.Time) *Record {
		return &Record{store: s, flow: atomicFlow, principal: "p", key: "k", names: s.scheme.Record(atomicFlow, "k"),
			fp: fp, owner: uuid.New(), at: at}
	}
	// The scheme-1 request commits its first phase, and stalls past its lease.
	if err := postgres.InTx(ctx, old.flowDB, func(tx pgx.Tx) error { return record(old.store, t0).Claim(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
	// A copy on the cleaned-up replica takes it over, in two phases.
	r := record(clean.store, t0.Add(DefaultLease+time.Second))
	for phase := range 2 {
		if err := postgres.InTx(ctx, clean.flowDB, func(tx pgx.Tx) error { return r.Claim(ctx, tx) }); err != nil {
			t.Fatalf("phase %d: %v", phase+1, err)
		}
	}
	if got := counter(t, clean, "shop_idempotency_cross_scheme_total", "flow", atomicFlow, "scheme", "1"); got != 1 {
		t.Fatalf("counted %v times, want once", got)
	}
}
