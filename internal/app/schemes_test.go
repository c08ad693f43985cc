package app_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/seats"
)

// schemeRows are the mixed-version race's rows: two replicas, one on key
// scheme 1 (as the release before schemes) and one on scheme 2 in
// transition, with the layers of the row.
var schemeRows = []struct {
	name   string
	layers layers.Set
	blind  bool // the transition rules off (keyscheme.Scheme.Blind)
	breaks bool // a request makes two effects
}{
	{name: "every layer"},
	{name: "the key and the lock alone", layers: layers.Off(layers.Database...)},
	{name: "the key and the lock alone, transition rules off", layers: layers.Off(layers.Database...), blind: true, breaks: true},
	// Defence in depth: with the rules off, the scheme-2 replica runs a
	// copy the scheme-1 one ran, and the layers below find the first
	// effect and answer it again.
	{name: "every layer, transition rules off", blind: true},
}

// The constraints the rows with layer 4 off drop, by their catalogue names;
// and the payment's request key, which stands behind layer 0 (the key kept
// with the payment), so that the record and the lock are all that is left.
// A hold's (holds_user_request_key) stays: the hold's insert names it in
// its ON CONFLICT.
var (
	schemeDrops = []string{
		orders.ConstraintUserRequestKey, inventory.ConstraintStockNonNegative,
		payments.ConstraintOneActive, seats.ConstraintOneActiveHold, likes.ConstraintOneLike,
		outbox.ConstraintOnePerEvent,
	}
	requestKeyConstraints = []postgres.Constraint{
		{Table: "payments", Name: payments.ConstraintRequestKey},
	}
)

// TestSchemes_MixedVersionRace: replicas on key schemes 1 and 2, side by
// side on one database and one lock quorum, as during a rollout. Each
// request of each flow (an order, its payment, a seat hold, a like) is
// sent four times at once, two copies to each replica, by a client that
// retries what it is told to retry. Invariant: one effect per request,
// counted in SQL and, for payments, at the gateway; and every copy of a
// request answered the same.
//
// With every layer on, and with the key and the lock alone (layers 2–4
// off), it holds: the transition rules make the two schemes' records and
// locks one. With the rules off, the scheme-2 replica does not see the
// scheme-1 replica's records or locks: with the key and the lock alone a
// request makes two orders, two charges, two holds, two likes; with every
// layer on, the layers below stop the second effect, but a copy the
// scheme-2 replica ran again is answered something other than the first
// answer (a payment already made, refused as invalid_state).
func TestSchemes_MixedVersionRace(t *testing.T) {
	for _, row := range schemeRows {
		t.Run(strings.ReplaceAll(row.name, " ", "_"), func(t *testing.T) {
			e, effects, contradictions, done := mixedVersionRace(t, row.layers, row.blind)
			t.Logf("second effects %d, copies answered differently %d; work done: %s", effects, contradictions, done)
			switch {
			case !row.breaks && effects+contradictions != 0:
				t.Errorf("%d second effects and %d requests whose copies were answered differently, want none", effects, contradictions)
			case row.breaks && effects == 0:
				t.Errorf("no request made two effects: with the transition rules off the scenario should break")
			}
			if !row.breaks {
				e.AssertBooks(t) // each paid order has its one charge at the gateway, and no charge is unaccounted for
			}
		})
	}
}

// mixedVersionRace runs the race and returns its replicas, the second
// effects, the requests whose copies were answered differently, and the
// work done.
func mixedVersionRace(t *testing.T, on layers.Set, blind bool) (e *apptest.Env, effects, contradictions int, done string) {
	const (
		users  = 8
		copies = 4
	)
	e = apptest.NewEach(t, map[string]string{
		"SHOP_LOCK_MODE": "strict", // a lock the loaded machine's Redis answers late is refused and retried, never skipped
		"SHOP_SEAT_LOCK": "redsync",
		"SHOP_LIKE_LOCK": "redsync",
	}, []map[string]string{{"SHOP_KEY_SCHEME": "1"}, {"SHOP_KEY_SCHEME": "2"}},
		app.Deps{Variants: variants.For(on, "", nil), BlindSchemes: blind})
	if !on.On(layers.Constraint) {
		dropSchemeConstraints(t, e)
	}
	apptest.MustCreateProduct(t, e.R(0), "MIX-1", 1000, 100)
	ev := apptest.MustCreateEvent(t, e.R(0), "mixed", 1, users)
	us := testenv.Users(t, e.DB, users)
	post := apptest.MustCreatePost(t, e.R(0), us[0].Token, "mixed")
	unpaid := make([]string, users)
	for i, u := range us {
		unpaid[i] = apptest.MustCreateOrder(t, e.R(0), u.Token, apptest.Line{SKU: "MIX-1", Quantity: 1}).ID
	}
	e.Warm(t, 16)

	// Each request: its copies' final answers, by request.
	type request struct {
		flow string
		send func(r *apptest.Replica) apptest.Response
	}
	var reqs []request
	for i, u := range us {
		orderKey, payKey, holdKey := apptest.NewKey(), apptest.NewKey(), apptest.NewKey()
		reqs = append(reqs,
			request{"order", func(r *apptest.Replica) apptest.Response {
				return r.Do(t, http.MethodPost, "/v1/orders", u.Token, apptest.OrderBody(apptest.Line{SKU: "MIX-1", Quantity: 1}), "Idempotency-Key", orderKey)
			}},
			request{"pay", func(r *apptest.Replica) apptest.Response {
				return r.Do(t, http.MethodPost, payPath(unpaid[i]), u.Token, map[string]string{"payment_method": "pm_card_ok"}, "Idempotency-Key", payKey)
			}},
			request{"hold", func(r *apptest.Replica) apptest.Response {
				return apptest.HoldSeats(t, r, u.Token, ev.ID, holdKey, fmt.Sprintf("A%d", i+1))
			}},
			request{"like", func(r *apptest.Replica) apptest.Response {
				return apptest.SetLike(t, r, u.Token, post.ID, true)
			}})
	}
	answers := make([][]apptest.Response, len(reqs))
	var mu sync.Mutex
	testenv.Together(len(reqs)*copies, func(i int) {
		// Copy k of request q goes to replica q+k: two copies to each
		// replica, whatever the number of requests (routed by i, an even
		// number of requests sent every copy of one to the same replica).
		q, k := i%len(reqs), i/len(reqs)
		res := apptest.UntilNotBusy(t, func(attempt int) apptest.Response { return reqs[q].send(e.R(q + k + attempt)) })
		mu.Lock()
		answers[q] = append(answers[q], res)
		mu.Unlock()
	})
	e.SettleLeftovers(t)

	for q, rs := range answers {
		for _, r := range rs[1:] {
			// A like's answer carries the post's count, which the other
			// users' likes move: its copies agree on the status.
			if r.Status != rs[0].Status || (reqs[q].flow != "like" && !bytes.Equal(r.Body, rs[0].Body)) {
				contradictions++
				t.Logf("%s: copies answered %s and %s", reqs[q].flow, rs[0], r)
				break
			}
		}
	}
	secondOrders := e.Count(t, `SELECT (count(*) - count(DISTINCT (user_id, request_key)))::int FROM orders`)
	charges := 0
	for _, id := range unpaid {
		charges += len(e.Gateway.Charges(id))
	}
	secondHolds := e.Count(t, `SELECT (count(*) - count(DISTINCT (user_id, request_key)))::int FROM holds`)
	lc := apptest.CountLikes(t, e, us[0].Token, post.ID)
	effects = secondOrders + max(charges-users, 0) + secondHolds + max(lc.Counted-users, 0) + lc.Dupes
	t.Logf("second orders %d, charges %d of %d orders, second holds %d, likes counted %d of %d users (%d duplicate rows)",
		secondOrders, charges, users, secondHolds, lc.Counted, users, lc.Dupes)

	paid := e.Count(t, `SELECT count(*)::int FROM orders WHERE id = ANY($1) AND status = 'paid'`, unpaid)
	created := e.Count(t, `SELECT count(DISTINCT (user_id, request_key))::int FROM orders`) - users
	held := e.Count(t, `SELECT count(DISTINCT (user_id, request_key))::int FROM holds`)
	if paid != users || created != users || held != users || lc.Users != users {
		t.Errorf("work not done: %d of %d orders created, %d paid, %d holds, %d likes", created, users, paid, held, lc.Users)
	}
	return e, effects, contradictions, fmt.Sprintf("%d orders, %d paid, %d holds, %d likes", created, paid, held, lc.Users)
}

// TestSchemes_RollingRestart: orders and payments run on two replicas,
// both on key scheme 1, while each is replaced in turn as a rolling update
// does (out of rotation, drained, started again), replica 0 on scheme 2.
// Every client sends each request twice at once, to two replicas, as a
// retry after a lost answer does. Invariant: every order acknowledged (201)
// exists, one per key; every payment acknowledged has its order paid with
// one charge at the gateway, and no charge without a paid order; no 500.
//
// It holds with every layer and with the key and the lock alone; with the
// key and the lock alone and the transition rules off, once replica 0 is
// back on scheme 2 the copies that land on both make second orders and
// second charges.
func TestSchemes_RollingRestart(t *testing.T) {
	for _, row := range schemeRows[:3] {
		t.Run(strings.ReplaceAll(row.name, " ", "_"), func(t *testing.T) {
			effects, lost, done := rollingRestart(t, row.layers, row.blind)
			t.Logf("second effects %d, acknowledged and lost %d; %s", effects, lost, done)
			switch {
			case lost != 0:
				t.Errorf("%d acknowledged writes lost", lost)
			case !row.breaks && effects != 0:
				t.Errorf("%d second effects, want none", effects)
			case row.breaks && effects == 0:
				t.Errorf("no request made two effects: with the transition rules off the rolling restart should break")
			}
		})
	}
}

func rollingRestart(t *testing.T, on layers.Set, blind bool) (effects, lost int, done string) {
	const clients = 8
	e := apptest.NewEach(t, map[string]string{"SHOP_LOCK_MODE": "strict"},
		[]map[string]string{{"SHOP_KEY_SCHEME": "1"}, {"SHOP_KEY_SCHEME": "1"}},
		app.Deps{Variants: variants.For(on, "", nil), BlindSchemes: blind})
	if !on.On(layers.Constraint) {
		dropSchemeConstraints(t, e)
	}
	apptest.MustCreateProduct(t, e.R(0), "ROLL-1", 1000, 100000)
	us := testenv.Users(t, e.DB, clients)
	e.Warm(t, 16)

	var (
		mu         sync.Mutex
		acked      []string // orders answered 201
		paidAcked  []string // orders whose payment was answered 200 or 201
		internal   []apptest.Response
		stopped    = make(chan struct{})
		restarting sync.WaitGroup
	)
	// twice sends a request's two copies at once, to replicas i and i+1,
	// each retried as it asks, and returns both final answers.
	twice := func(i int, send func(r *apptest.Replica) apptest.Response) [2]apptest.Response {
		var out [2]apptest.Response
		var wg sync.WaitGroup
		for c := range 2 {
			wg.Go(func() {
				out[c] = apptest.UntilNotBusy(t, func(attempt int) apptest.Response { return send(e.R(i + c + attempt)) })
			})
		}
		wg.Wait()
		return out
	}
	restarting.Go(func() {
		defer close(stopped)
		time.Sleep(700 * time.Millisecond)
		e.Restart(t, 0, map[string]string{"SHOP_KEY_SCHEME": "2"})
		time.Sleep(700 * time.Millisecond)
		e.Restart(t, 1, nil)
		time.Sleep(700 * time.Millisecond)
	})
	var wg sync.WaitGroup
	for i, u := range us {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stopped:
					return
				default:
				}
				orderKey, payKey := apptest.NewKey(), apptest.NewKey()
				var id string
				for _, r := range twice(i+n, func(r *apptest.Replica) apptest.Response {
					return r.Do(t, http.MethodPost, "/v1/orders", u.Token, apptest.OrderBody(apptest.Line{SKU: "ROLL-1", Quantity: 1}), "Idempotency-Key", orderKey)
				}) {
					mu.Lock()
					switch {
					case r.Status == http.StatusCreated:
						o := apptest.Decode[apptest.Order](t, r)
						acked, id = append(acked, o.ID), o.ID
					case r.Status >= 500:
						internal = append(internal, r)
					}
					mu.Unlock()
				}
				if id == "" {
					continue
				}
				for _, r := range twice(i+n, func(r *apptest.Replica) apptest.Response {
					return r.Do(t, http.MethodPost, payPath(id), u.Token, map[string]string{"payment_method": "pm_card_ok"}, "Idempotency-Key", payKey)
				}) {
					mu.Lock()
					switch {
					case r.Status == http.StatusOK || r.Status == http.StatusCreated:
						paidAcked = append(paidAcked, id)
					case r.Status >= 500:
						internal = append(internal, r)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	restarting.Wait()
	e.SettleLeftovers(t)
	for _, r := range internal {
		t.Errorf("answered %s", r)
	}

	acked, paidAcked = distinct(acked), distinct(paidAcked)
	lost = len(acked) - e.Count(t, `SELECT count(*)::int FROM orders WHERE id = ANY($1::uuid[])`, acked) +
		len(paidAcked) - e.Count(t, `SELECT count(*)::int FROM orders WHERE id = ANY($1::uuid[]) AND status = 'paid'`, paidAcked)
	secondOrders := e.Count(t, `SELECT (count(*) - count(DISTINCT (user_id, request_key)))::int FROM orders`)
	extraCharges, unpaidCharged := 0, 0
	for _, id := range orderIDs(t, e) {
		n := len(e.Gateway.Charges(id))
		extraCharges += max(n-1, 0)
		if n > 0 && e.Count(t, `SELECT count(*)::int FROM orders WHERE id = $1 AND status = 'paid'`, id) == 0 {
			unpaidCharged++
		}
	}
	if len(acked) == 0 || len(paidAcked) == 0 {
		t.Errorf("no work done: %d orders and %d payments acknowledged", len(acked), len(paidAcked))
	}
	return secondOrders + extraCharges + unpaidCharged, lost,
		fmt.Sprintf("%d orders answered 201, %d answered paid; second orders %d, second charges %d, charges on unpaid orders %d",
			len(acked), len(paidAcked), secondOrders, extraCharges, unpaidCharged)
}

// orderIDs are the ids of every order in e's database.
func orderIDs(t *testing.T, e *apptest.Env) []string {
	t.Helper()
	rows, err := e.DB.Query(context.Background(), `SELECT id::text FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func distinct(ids []string) []string {
	slices.Sort(ids)
	return slices.Compact(ids)
}

// dropSchemeConstraints drops schemeDrops and requestKeyConstraints from
// e's database: the rows with layer 4 off.
func dropSchemeConstraints(t *testing.T, e *apptest.Env) {
	t.Helper()
	for _, c := range requestKeyConstraints {
		if _, err := e.DB.Exec(context.Background(), c.Drop()); err != nil {
			t.Fatalf("%s: %v", c.Drop(), err)
		}
	}
	e.Drop(t, schemeDrops...)
}
