package app_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/testenv"
)

// spellings are other ways of writing the UUID id that uuid.Parse and
// PostgreSQL would read as the same value. The API knows one spelling, the
// lower-case 8-4-4-4-12 form its answers use; any other names no resource.
func spellings(id string) map[string]string {
	s := map[string]string{
		"URN":       "urn:uuid:" + id,
		"UpperCase": strings.ToUpper(id),
		"Braces":    "{" + id + "}",
		"NoDashes":  strings.ReplaceAll(id, "-", ""),
	}
	if i := strings.IndexAny(id, "abcdef"); i >= 0 {
		s["OneUpper"] = id[:i] + strings.ToUpper(id[i:i+1]) + id[i+1:]
	}
	return s
}

// lockAcquisitions is the replica's count of locks taken.
func lockAcquisitions(t testing.TB, r *apptest.Replica) float64 {
	t.Helper()
	families, err := r.App.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "shop_lock_acquisitions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelOf(m, "outcome") == "acquired" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Every route with an order id answers 404 to another spelling of the id,
// before any lock or row is touched; none answers 500.
func TestOrders_IDSpellings(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "IDS", 100, 10)
	u := apptest.MustCreateUser(t, r, "ida")
	o := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "IDS", Quantity: 2})
	locks := lockAcquisitions(t, r)

	for name, id := range spellings(o.ID) {
		t.Run(name, func(t *testing.T) {
			for _, req := range []struct{ method, path string }{
				{http.MethodGet, "/v1/orders/" + id},
				{http.MethodPost, "/v1/orders/" + id + "/cancel"},
				{http.MethodGet, payPath(id)},
				{http.MethodPost, payPath(id)},
			} {
				var body any
				if req.path == payPath(id) && req.method == http.MethodPost {
					body = map[string]string{"payment_method": gateway.MethodOK}
				}
				res := r.Do(t, req.method, req.path, u.Token, body, "Idempotency-Key", apptest.NewKey())
				if res.Status != http.StatusNotFound || res.Code() != "not_found" {
					t.Errorf("%s %s: got %s, want 404 not_found", req.method, req.path, res)
				}
			}
		})
	}
	if got := lockAcquisitions(t, r); got != locks {
		t.Errorf("%v locks taken for other spellings of the id, want none", got-locks)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM payments`); n != 0 {
		t.Errorf("%d payments written, want none", n)
	}
	if charges := e.Gateway.Charges(""); len(charges) != 0 {
		t.Errorf("other spellings reached the gateway: %+v", charges)
	}
	if got := payOrderStatus(t, r, u.Token, o.ID); got != "pending_payment" {
		t.Errorf("order is %s, want pending_payment", got)
	}
	if got := e.Stock(t, "IDS"); got != 8 {
		t.Errorf("stock %d, want 8 (the order keeps its stock)", got)
	}
	// The one spelling still works.
	apptest.WantStatus(t, r.Do(t, http.MethodPost, "/v1/orders/"+o.ID+"/cancel", u.Token, nil), http.StatusOK)
}

// TestPayments_IDSpellingsRace: twelve pay requests for one order at once,
// three in each of four spellings of its id. Only the canonical spelling
// reaches the pay flow, so only it takes the order's payment lock
// ("payment:"+id); a lock keyed on the raw id would let each spelling hold
// a lock of its own and leave the database as the only guard.
func TestPayments_IDSpellingsRace(t *testing.T) {
	if testing.Short() {
		t.Skip("races real PostgreSQL, Redis and a gateway")
	}
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "IDS-RACE", 700, 10)
	u := apptest.MustCreateUser(t, r, "ivo")
	o := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "IDS-RACE", Quantity: 1})
	ids := []string{o.ID, strings.ToUpper(o.ID), "{" + o.ID + "}", strings.ReplaceAll(o.ID, "-", "")}
	e.Warm(t, 12)
	locks := lockAcquisitions(t, r)

	var mu sync.Mutex
	answers := map[string][]string{} // spelling → answers
	testenv.Together(12, func(i int) {
		id := ids[i%len(ids)]
		res := payReq(t, r, u.Token, id, gateway.MethodOK, apptest.NewKey())
		label := http.StatusText(res.Status)
		if res.Status >= 400 {
			label = res.Code()
		}
		if res.Status == http.StatusCreated {
			if p := apptest.Decode[paymentJSON](t, res); p.OrderID != o.ID {
				t.Errorf("payment answered for order %q, want the canonical %s", p.OrderID, o.ID)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		answers[id] = append(answers[id], label)
	})
	t.Logf("answers: %v", answers)

	for _, id := range ids[1:] {
		for _, a := range answers[id] {
			if a != "not_found" {
				t.Errorf("pay of %s answered %s, want not_found: another spelling reached the flow", id, a)
			}
		}
	}
	for _, a := range answers[o.ID] {
		switch a {
		case "Created", "invalid_state", "resource_busy":
		default:
			t.Errorf("pay of %s answered %s", o.ID, a)
		}
	}
	if got := lockAcquisitions(t, r) - locks; got > 3 {
		t.Errorf("%v payment locks taken for 3 requests in the canonical spelling, want at most 3", got)
	}
	payWantCharges(t, e, o.ID, 1)
	if n := e.Count(t, `SELECT count(*)::int FROM payments WHERE order_id = $1 AND status = 'succeeded'`, o.ID); n != 1 {
		t.Errorf("%d succeeded payments, want 1", n)
	}
	if got := payOrderStatus(t, r, u.Token, o.ID); got != "paid" {
		t.Errorf("order is %s, want paid", got)
	}
	e.AssertBooks(t)
}
