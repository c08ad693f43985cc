package app_test

import (
	"net/http"
	"testing"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/app"
)

// lostCommitCase is one write whose commit reaches PostgreSQL and whose
// answer is lost: the request answers 503, the client sends it again with
// the same Idempotency-Key, and the retry must answer what was committed.
type lostCommitCase struct {
	name string
	// marker is a piece of the statement whose commit loses its answer.
	marker string
	// setup makes what the request needs, through the replica; send is
	// the request, sent twice with the same key.
	setup func(t *testing.T, e *apptest.Env, u apptest.User) lostCommitTarget
	send  func(t *testing.T, r *apptest.Replica, u apptest.User, target lostCommitTarget, key string) apptest.Response
	// lost judges the answer of the request whose commit answer was lost;
	// nil is 503 unavailable.
	lost func(t *testing.T, first apptest.Response)
	// check judges the retry's answer against the database.
	check func(t *testing.T, e *apptest.Env, u apptest.User, target lostCommitTarget, key string, retry apptest.Response)
}

// lostCommitTarget is what a case's request acts on.
type lostCommitTarget struct{ id, sku string }

// TestLostCommit_RetryGetsWhatWasCommitted cuts the connection to
// PostgreSQL after each flow's commit reached it, before its answer came
// back (testenv.CommitCutter), then sends the request again with the same
// key. The retry gets the committed resource, and the database holds it
// once: after a commit, the key finds what was committed. The refund flow
// commits twice, and each of its commits loses its answer in a case of its
// own: the begin's (the refund processing, its amount held) and the
// settle's (the refund succeeded, the key completed).
func TestLostCommit_RetryGetsWhatWasCommitted(t *testing.T) {
	cutter := testenv.NewCommitCutter(t)
	e := apptest.NewThrough(t, 1, nil, app.Deps{}, cutter)
	r := e.R(0)

	cases := []lostCommitCase{
		{
			name:   "Hold",
			marker: "INSERT INTO holds",
			setup: func(t *testing.T, e *apptest.Env, u apptest.User) lostCommitTarget {
				return lostCommitTarget{id: apptest.MustCreateEvent(t, r, "lost hold", 2, 5).ID}
			},
			send: func(t *testing.T, r *apptest.Replica, u apptest.User, ev lostCommitTarget, key string) apptest.Response {
				return apptest.HoldSeats(t, r, u.Token, ev.id, key, "A1", "A2")
			},
			check: func(t *testing.T, e *apptest.Env, u apptest.User, ev lostCommitTarget, key string, retry apptest.Response) {
				apptest.WantStatus(t, retry, http.StatusCreated)
				h := apptest.Decode[apptest.SeatHold](t, retry)
				if n := e.Count(t, `SELECT count(*) FROM holds WHERE event_id = $1`, ev.id); n != 1 {
					t.Errorf("%d holds on the event, want 1", n)
				}
				if n := e.Count(t, `SELECT count(*) FROM holds WHERE id = $1 AND user_id = $2 AND status = 'active'`, h.ID, u.ID); n != 1 {
					t.Errorf("the retry answered hold %s, which is not the user's one active hold", h.ID)
				}
				if n := e.Count(t, `SELECT count(*) FROM seats WHERE event_id = $1 AND hold_id = $2`, ev.id, h.ID); n != 2 {
					t.Errorf("hold %s holds %d seats, want 2", h.ID, n)
				}
			},
		},
		{
			name:   "Confirm",
			marker: "INSERT INTO bookings",
			setup: func(t *testing.T, e *apptest.Env, u apptest.User) lostCommitTarget {
				ev := apptest.MustCreateEvent(t, r, "lost confirm", 2, 5)
				res := apptest.HoldSeats(t, r, u.Token, ev.ID, apptest.NewKey(), "B1")
				apptest.WantStatus(t, res, http.StatusCreated)
				return lostCommitTarget{id: apptest.Decode[apptest.SeatHold](t, res).ID}
			},
			send: func(t *testing.T, r *apptest.Replica, u apptest.User, h lostCommitTarget, key string) apptest.Response {
				return apptest.ConfirmHold(t, r, u.Token, h.id, key)
			},
			check: func(t *testing.T, e *apptest.Env, u apptest.User, h lostCommitTarget, key string, retry apptest.Response) {
				apptest.WantStatus(t, retry, http.StatusCreated)
				b := apptest.Decode[apptest.Booking](t, retry)
				if n := e.Count(t, `SELECT count(*) FROM bookings WHERE hold_id = $1`, h.id); n != 1 {
					t.Errorf("%d bookings of the hold, want 1", n)
				}
				if n := e.Count(t, `SELECT count(*) FROM bookings WHERE id = $1 AND hold_id = $2`, b.ID, h.id); n != 1 {
					t.Errorf("the retry answered booking %s, not the hold's", b.ID)
				}
			},
		},
		{
			name:   "Release",
			marker: "UPDATE seats SET status = 'available'",
			setup: func(t *testing.T, e *apptest.Env, u apptest.User) lostCommitTarget {
				ev := apptest.MustCreateEvent(t, r, "lost release", 2, 5)
				res := apptest.HoldSeats(t, r, u.Token, ev.ID, apptest.NewKey(), "A3")
				apptest.WantStatus(t, res, http.StatusCreated)
				return lostCommitTarget{id: apptest.Decode[apptest.SeatHold](t, res).ID}
			},
			send: func(t *testing.T, r *apptest.Replica, u apptest.User, h lostCommitTarget, _ string) apptest.Response {
				return apptest.ReleaseHold(t, r, u.Token, h.id)
			},
			check: func(t *testing.T, e *apptest.Env, u apptest.User, h lostCommitTarget, _ string, retry apptest.Response) {
				apptest.WantStatus(t, retry, http.StatusOK)
				if got := apptest.Decode[apptest.SeatHold](t, retry); got.ID != h.id || got.Status != "released" {
					t.Errorf("retry answered %s, want hold %s released", retry, h.id)
				}
				if n := e.Count(t, `SELECT count(*) FROM seats WHERE hold_id = $1`, h.id); n != 0 {
					t.Errorf("%d seats still held by the released hold", n)
				}
			},
		},
		{
			name:   "CreateOrder",
			marker: "INSERT INTO orders",
			setup: func(t *testing.T, e *apptest.Env, u apptest.User) lostCommitTarget {
				return lostCommitTarget{sku: apptest.MustCreateProduct(t, r, "LOST-ORDER", 500, 10).SKU}
			},
			send: func(t *testing.T, r *apptest.Replica, u apptest.User, p lostCommitTarget, key string) apptest.Response {
				return r.Do(t, http.MethodPost, "/v1/orders", u.Token, apptest.OrderBody(apptest.Line{SKU: p.sku, Quantity: 2}), "Idempotency-Key", key)
			},
			check: func(t *testing.T, e *apptest.Env, u apptest.User, p lostCommitTarget, key string, retry apptest.Response) {
				apptest.WantStatus(t, retry, http.StatusCreated)
				o := apptest.Decode[apptest.Order](t, retry)
				if n := e.Count(t, `SELECT count(*) FROM orders WHERE user_id = $1`, u.ID); n != 1 {
					t.Errorf("%d orders of the user, want 1", n)
				}
				if n := e.Count(t, `SELECT count(*) FROM orders WHERE id = $1 AND request_key = $2`, o.ID, key); n != 1 {
					t.Errorf("the retry answered order %s, not the one of its key", o.ID)
				}
				if got := e.Stock(t, p.sku); got != 8 {
					t.Errorf("stock %d, want 8: the order's 2 taken once", got)
				}
			},
		},
		{
			name:   "CancelOrder",
			marker: "INSERT INTO stock_releases",
			setup: func(t *testing.T, e *apptest.Env, u apptest.User) lostCommitTarget {
				p := apptest.MustCreateProduct(t, r, "LOST-CANCEL", 500, 10)
				return lostCommitTarget{id: apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: p.SKU, Quantity: 3}).ID, sku: p.SKU}
			},
			send: func(t *testing.T, r *apptest.Replica, u apptest.User, o lostCommitTarget, _ string) apptest.Response {
				return r.Do(t, http.MethodPost, "/v1/orders/"+o.id+"/cancel", u.Token, nil)
			},
			check: func(t *testing.T, e *apptest.Env, u apptest.User, o lostCommitTarget, _ string, retry apptest.Response) {
				apptest.WantStatus(t, retry, http.StatusOK)
				if got := apptest.Decode[apptest.Order](t, retry); got.ID != o.id || got.Status != "cancelled" {
					t.Errorf("retry answered %s, want order %s cancelled", retry, o.id)
				}
				if n := e.Count(t, `SELECT count(*) FROM stock_releases WHERE order_id = $1`, o.id); n != 1 {
					t.Errorf("%d stock releases of the order, want 1", n)
				}
				if got := e.Stock(t, o.sku); got != 10 {
					t.Errorf("stock %d, want 10: the order's 3 back once", got)
				}
			},
		},
		{
			name:   "Pay",
			marker: "INSERT INTO payments",
			setup: func(t *testing.T, e *apptest.Env, u apptest.User) lostCommitTarget {
				p := apptest.MustCreateProduct(t, r, "LOST-PAY", 700, 10)
				return lostCommitTarget{id: apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: p.SKU, Quantity: 1}).ID}
			},
			send: func(t *testing.T, r *apptest.Replica, u apptest.User, o lostCommitTarget, key string) apptest.Response {
				return payReq(t, r, u.Token, o.id, gateway.MethodOK, key)
			},
			check: func(t *testing.T, e *apptest.Env, u apptest.User, o lostCommitTarget, key string, retry apptest.Response) {
				apptest.WantStatus(t, retry, http.StatusCreated)
				p := apptest.Decode[paymentJSON](t, retry)
				if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1`, o.id); n != 1 {
					t.Errorf("%d payments of the order, want 1", n)
				}
				if n := e.Count(t, `SELECT count(*) FROM payments WHERE id = $1 AND status = 'succeeded'`, p.ID); n != 1 {
					t.Errorf("the retry answered payment %s, not the order's one succeeded payment", p.ID)
				}
				if n := e.Count(t, `SELECT count(*) FROM orders WHERE id = $1 AND status = 'paid'`, o.id); n != 1 {
					t.Errorf("order %s is not paid", o.id)
				}
				payWantCharges(t, e, o.id, 1)
			},
		},
		{
			// The begin committed the processing refund and its claim of
			// the key; the request answers 503, and nothing was sent to the
			// processor. The retry finds the refund under the lock
			// (refunds_order_request_key), sends it, and settles it.
			name:   "RefundBegin",
			marker: "INSERT INTO refunds",
			setup:  lostRefundSetup(r, "LOST-REFUND-BEGIN"),
			send:   lostRefundSend,
			check:  lostRefundCheck(http.StatusCreated),
		},
		{
			// The settle committed the refund succeeded, its order.refunded
			// and the key's answer. The flow cannot tell and answers 202
			// processing, which the idempotency middleware goes to store
			// for the key: it finds the key completed, and answers what
			// was committed instead, the 201, replayed. The retry gets it
			// too, and the processor was asked once.
			name:   "RefundSettle",
			marker: "UPDATE refunds",
			setup:  lostRefundSetup(r, "LOST-REFUND-SETTLE"),
			send:   lostRefundSend,
			lost: func(t *testing.T, first apptest.Response) {
				apptest.WantStatus(t, first, http.StatusCreated)
				if got := apptest.Decode[refundJSON](t, first); got.Status != "succeeded" || first.Header.Get("Idempotent-Replayed") != "true" {
					t.Errorf("the lost settle answered %s, want the committed refund, replayed from its key", first)
				}
			},
			check: lostRefundCheck(http.StatusCreated),
		},
		{
			name:   "Like",
			marker: "INSERT INTO likes",
			setup: func(t *testing.T, e *apptest.Env, u apptest.User) lostCommitTarget {
				return lostCommitTarget{id: apptest.MustCreatePost(t, r, u.Token, "lost like").ID}
			},
			send: func(t *testing.T, r *apptest.Replica, u apptest.User, p lostCommitTarget, _ string) apptest.Response {
				return apptest.SetLike(t, r, u.Token, p.id, true)
			},
			check: func(t *testing.T, e *apptest.Env, u apptest.User, p lostCommitTarget, _ string, retry apptest.Response) {
				apptest.WantStatus(t, retry, http.StatusOK)
				if got := apptest.Decode[apptest.LikeAnswer](t, retry); !got.Liked || got.LikeCount != 1 {
					t.Errorf("retry answered %s, want liked with a count of 1", retry)
				}
				apptest.CountLikes(t, e, u.Token, p.id).Check(t, 1)
			},
		},
		{
			name:   "Unlike",
			marker: "UPDATE likes SET liked",
			setup: func(t *testing.T, e *apptest.Env, u apptest.User) lostCommitTarget {
				p := apptest.MustCreatePost(t, r, u.Token, "lost unlike")
				apptest.WantStatus(t, apptest.SetLike(t, r, u.Token, p.ID, true), http.StatusOK)
				return lostCommitTarget{id: p.ID}
			},
			send: func(t *testing.T, r *apptest.Replica, u apptest.User, p lostCommitTarget, _ string) apptest.Response {
				return apptest.SetLike(t, r, u.Token, p.id, false)
			},
			check: func(t *testing.T, e *apptest.Env, u apptest.User, p lostCommitTarget, _ string, retry apptest.Response) {
				apptest.WantStatus(t, retry, http.StatusOK)
				if got := apptest.Decode[apptest.LikeAnswer](t, retry); got.Liked || got.LikeCount != 0 {
					t.Errorf("retry answered %s, want not liked with a count of 0", retry)
				}
				apptest.CountLikes(t, e, u.Token, p.id).Check(t, 0)
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := apptest.MustCreateUser(t, r, "lost "+c.name)
			target := c.setup(t, e, u)
			key := apptest.NewKey()

			lost := cutter.Lost()
			cutter.LoseCommitOf(c.marker)
			first := c.send(t, r, u, target, key)
			if cutter.Lost() != lost+1 {
				t.Fatalf("no commit answer of %q was lost; the first request answered %s", c.marker, first)
			}
			if c.lost != nil {
				c.lost(t, first)
			} else {
				apptest.WantProblem(t, first, http.StatusServiceUnavailable, "unavailable")
			}

			c.check(t, e, u, target, key, c.send(t, r, u, target, key))
		})
	}
}

// lostRefundAmount is what the lost-commit cases refund of an order of
// 1000 cents.
const lostRefundAmount = 400

// lostRefundSetup makes a product sku of 1000 cents and a paid order of
// one of it, through r.
func lostRefundSetup(r *apptest.Replica, sku string) func(t *testing.T, e *apptest.Env, u apptest.User) lostCommitTarget {
	return func(t *testing.T, e *apptest.Env, u apptest.User) lostCommitTarget {
		p := apptest.MustCreateProduct(t, r, sku, 1000, 10)
		o := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: p.SKU, Quantity: 1})
		apptest.WantStatus(t, payReq(t, r, u.Token, o.ID, gateway.MethodOK, apptest.NewKey()), http.StatusCreated)
		return lostCommitTarget{id: o.ID, sku: p.SKU}
	}
}

// lostRefundSend refunds lostRefundAmount of the order under key.
func lostRefundSend(t *testing.T, r *apptest.Replica, u apptest.User, o lostCommitTarget, key string) apptest.Response {
	return refundReq(t, r, u.Token, o.id, map[string]any{"amount_cents": lostRefundAmount}, key)
}

// lostRefundCheck judges a retry that must answer status with the
// request's one refund, succeeded: one refund of the order, the key's,
// the order holding its amount, and one refund of that amount at the
// processor, the one the refund records.
func lostRefundCheck(status int) func(t *testing.T, e *apptest.Env, u apptest.User, o lostCommitTarget, key string, retry apptest.Response) {
	return func(t *testing.T, e *apptest.Env, u apptest.User, o lostCommitTarget, key string, retry apptest.Response) {
		apptest.WantStatus(t, retry, status)
		got := apptest.Decode[refundJSON](t, retry)
		if got.Status != "succeeded" || got.AmountCents != lostRefundAmount || got.OrderID != o.id {
			t.Errorf("retry answered %s, want the refund of %d succeeded", retry, lostRefundAmount)
		}
		if n := e.Count(t, `SELECT count(*) FROM refunds WHERE order_id = $1`, o.id); n != 1 {
			t.Errorf("%d refunds of the order, want 1", n)
		}
		if n := e.Count(t, `SELECT count(*) FROM refunds WHERE id = $1 AND request_key = $2 AND status = 'succeeded'`, got.ID, key); n != 1 {
			t.Errorf("the retry answered refund %s, not the key's one succeeded refund", got.ID)
		}
		if n := e.Count(t, `SELECT count(*) FROM orders WHERE id = $1 AND refunded_cents = $2`, o.id, lostRefundAmount); n != 1 {
			t.Errorf("order %s does not hold the refund's %d cents", o.id, lostRefundAmount)
		}
		charge := payWantCharges(t, e, o.id, 1)[0]
		made := e.Gateway.Refunds(charge.ID)
		if len(made) != 1 || made[0].AmountCents != lostRefundAmount {
			t.Fatalf("the processor made %+v of charge %s, want one refund of %d", made, charge.ID, lostRefundAmount)
		}
		if n := e.Count(t, `SELECT count(*) FROM refunds WHERE id = $1 AND processor_refund_id = $2`, got.ID, made[0].ID); n != 1 {
			t.Errorf("refund %s does not record the processor's refund %s", got.ID, made[0].ID)
		}
	}
}
