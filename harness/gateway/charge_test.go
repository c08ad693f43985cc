package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/gateway/gatewaytest"
	"github.com/shop-example/shop/harness/testenv"
)

func TestAPI_Statuses(t *testing.T) {
	_, url := gatewaytest.Start(t, gateway.Options{})
	tests := []struct {
		name, method, path, key, body string
		status                        int
		code                          string
	}{
		{"ChargeOK", "POST", "/v1/charges", "k-ok", chargeJSON(500, gateway.MethodOK, "o1"), 201, ""},
		{"ChargeDeclined", "POST", "/v1/charges", "k-decl", chargeJSON(500, gateway.MethodDeclined, "o1"), 402, "payment_declined"},
		{"ChargeUnknownMethod", "POST", "/v1/charges", "k-unk", chargeJSON(500, "pm_card_gold", "o1"), 400, "invalid_request"},
		{"ChargeFlakyFirst", "POST", "/v1/charges", "k-flaky", chargeJSON(500, gateway.MethodFlaky, "o1"), 503, "unavailable"},
		{"NoKey", "POST", "/v1/charges", "", chargeJSON(500, gateway.MethodOK, "o1"), 400, "idempotency_key_required"},
		{"KeyTooLong", "POST", "/v1/charges", strings.Repeat("k", 256), chargeJSON(500, gateway.MethodOK, "o1"), 400, "idempotency_key_required"},
		{"KeyNotASCII", "POST", "/v1/charges", "clé", chargeJSON(500, gateway.MethodOK, "o1"), 400, "idempotency_key_required"},
		{"AmountZero", "POST", "/v1/charges", "k1", chargeJSON(0, gateway.MethodOK, "o1"), 400, "invalid_request"},
		{"AmountNegative", "POST", "/v1/charges", "k2", chargeJSON(-5, gateway.MethodOK, "o1"), 400, "invalid_request"},
		{"AmountNotInteger", "POST", "/v1/charges", "k3", `{"amount_cents": 1.5, "payment_method": "pm_card_ok", "reference": "o1"}`, 400, "invalid_request"},
		{"NoMethod", "POST", "/v1/charges", "k4", chargeJSON(500, "", "o1"), 400, "invalid_request"},
		{"NoReference", "POST", "/v1/charges", "k5", chargeJSON(500, gateway.MethodOK, ""), 400, "invalid_request"},
		{"ReferenceTooLong", "POST", "/v1/charges", "k6", chargeJSON(500, gateway.MethodOK, strings.Repeat("r", 256)), 400, "invalid_request"},
		{"UnknownField", "POST", "/v1/charges", "k7", `{"amount_cents": 5, "payment_method": "pm_card_ok", "reference": "o1", "currency": "eur"}`, 400, "invalid_request"},
		{"MalformedJSON", "POST", "/v1/charges", "k8", `{"amount_cents": `, 400, "invalid_request"},
		{"ListAll", "GET", "/v1/charges", "", "", 200, ""},
		{"ListByReference", "GET", "/v1/charges?reference=o1", "", "", 200, ""},
		{"RefundUnknownCharge", "POST", "/v1/refunds", "r1", `{"charge_id": "ch_nope"}`, 404, "not_found"},
		{"RefundNoKey", "POST", "/v1/refunds", "", `{"charge_id": "ch_nope"}`, 400, "idempotency_key_required"},
		{"RefundNoChargeID", "POST", "/v1/refunds", "r2", `{}`, 400, "invalid_request"},
		{"Health", "GET", "/healthz", "", "", 200, ""},
		{"WrongMethod", "DELETE", "/v1/charges", "", "", 405, "method_not_allowed"},
		{"NoRoute", "GET", "/v1/nothing", "", "", 404, "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testenv.MustSend(t, tt.method, url+tt.path, tt.key, tt.body)
			if r.Status != tt.status || r.Problem().Code != tt.code {
				t.Fatalf("got %v, want %d %q", r, tt.status, tt.code)
			}
		})
	}
}

func TestCharges_Create(t *testing.T) {
	s, url := gatewaytest.Start(t, gateway.Options{})
	r := testenv.MustSend(t, "POST", url+"/v1/charges", "k", chargeJSON(1250, gateway.MethodOK, "order-1"))
	ch := testenv.Decode[gateway.Charge](t, r)
	if r.Status != 201 || r.Replayed() || !strings.HasPrefix(ch.ID, "ch_") || ch.Status != gateway.StatusSucceeded ||
		ch.AmountCents != 1250 || ch.Reference != "order-1" || ch.PaymentMethod != gateway.MethodOK || ch.CreatedAt.IsZero() {
		t.Fatalf("got %v", r)
	}
	mustCharge(t, url, "k2", chargeJSON(99, gateway.MethodOK, "order-2"))
	if got := wantCharges(t, s, "order-1", 1); got[0] != ch {
		t.Fatalf("audit %+v, answered %+v", got[0], ch)
	}
	all := testenv.Decode[struct{ Items []gateway.Charge }](t, testenv.MustSend(t, "GET", url+"/v1/charges", "", ""))
	if len(all.Items) != 2 || all.Items[0].ID != ch.ID || all.Items[1].Reference != "order-2" {
		t.Fatalf("GET /v1/charges: %+v, want both in creation order", all.Items)
	}
	none := testenv.MustSend(t, "GET", url+"/v1/charges?reference=other", "", "")
	if !bytes.Equal(bytes.TrimSpace(none.Body), []byte(`{"items":[]}`)) {
		t.Fatalf("no charges: %s, want an empty list", none.Body)
	}
}

func TestCharges_SameKeyConcurrent(t *testing.T) {
	for _, method := range []string{gateway.MethodOK, gateway.MethodFlaky} {
		t.Run(method, func(t *testing.T) {
			s, url := gatewaytest.Start(t, gateway.Options{})
			const n = 20
			replies := make([]testenv.Reply, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					replies[i], errs[i] = testenv.Send(context.Background(), http.DefaultClient, "POST", url+"/v1/charges", "same", chargeJSON(700, method, "o-race"))
				})
			}
			wg.Wait()
			fresh := 0
			var body []byte
			for i, r := range replies {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				if r.Status == http.StatusServiceUnavailable && method == gateway.MethodFlaky {
					continue // the one first attempt
				}
				if r.Status != http.StatusCreated {
					t.Fatalf("request %d: %v", i, r)
				}
				if !r.Replayed() {
					fresh++
				}
				if body == nil {
					body = r.Body
				} else if !bytes.Equal(body, r.Body) {
					t.Fatalf("answers differ:\n%s\n%s", body, r.Body)
				}
			}
			if fresh != 1 {
				t.Fatalf("%d answers were not replays, want 1", fresh)
			}
			wantCharges(t, s, "o-race", 1)
		})
	}
}

func TestCharges_KeyReused(t *testing.T) {
	s, url := gatewaytest.Start(t, gateway.Options{})
	ch := mustCharge(t, url, "k", chargeJSON(500, gateway.MethodOK, "o1"))
	tests := []struct{ name, path, body string }{
		{"OtherAmount", "/v1/charges", chargeJSON(501, gateway.MethodOK, "o1")},
		{"OtherReference", "/v1/charges", chargeJSON(500, gateway.MethodOK, "o2")},
		{"OtherMethod", "/v1/charges", chargeJSON(500, gateway.MethodSlow, "o1")},
		{"OtherRoute", "/v1/refunds", `{"charge_id": "` + ch.ID + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testenv.MustSend(t, "POST", url+tt.path, "k", tt.body)
			if r.Status != http.StatusUnprocessableEntity || r.Problem().Code != "idempotency_key_reused" {
				t.Fatalf("got %v, want 422 idempotency_key_reused", r)
			}
		})
	}
	// The same request in other JSON is the same request.
	same := testenv.MustSend(t, "POST", url+"/v1/charges", "k", `{"reference":"o1","amount_cents":500,"payment_method":"pm_card_ok"}`)
	if same.Status != http.StatusCreated || !same.Replayed() || testenv.Decode[gateway.Charge](t, same) != ch {
		t.Fatalf("reordered body: got %v, want the replayed charge", same)
	}
	wantCharges(t, s, "", 1)
}

func TestCharges_DeclinedReplay(t *testing.T) {
	s, url := gatewaytest.Start(t, gateway.Options{})
	for i, wantReplayed := range []bool{false, true, true} {
		r := testenv.MustSend(t, "POST", url+"/v1/charges", "k", chargeJSON(500, gateway.MethodDeclined, "o1"))
		p := r.Problem()
		if r.Status != http.StatusPaymentRequired || p.Code != "payment_declined" || p.DeclineCode != "card_declined" || r.Replayed() != wantReplayed {
			t.Fatalf("attempt %d: got %v (replayed %t), want 402 card_declined (replayed %t)", i, r, r.Replayed(), wantReplayed)
		}
	}
	wantCharges(t, s, "", 0)
}

// An unknown payment method is the caller's mistake, not a decline: 400,
// and the key remembers nothing, so the same key with a real method then
// charges.
func TestCharges_UnknownMethod(t *testing.T) {
	s, url := gatewaytest.Start(t, gateway.Options{})
	unknown := testenv.MustSend(t, "POST", url+"/v1/charges", "k", chargeJSON(500, "pm_card_gold", "o1"))
	if p := unknown.Problem(); unknown.Status != http.StatusBadRequest || p.Code != "invalid_request" || !strings.Contains(p.Detail, "pm_card_gold") {
		t.Fatalf("unknown method: got %v, want 400 invalid_request naming the method", unknown)
	}
	wantCharges(t, s, "", 0)
	if r := testenv.MustSend(t, "POST", url+"/v1/charges", "k", chargeJSON(500, gateway.MethodOK, "o1")); r.Status != http.StatusCreated || r.Replayed() {
		t.Fatalf("the same key with a real method: got %v, want a new charge", r)
	}
	wantCharges(t, s, "", 1)
}

func TestCharges_Flaky(t *testing.T) {
	s, url := gatewaytest.Start(t, gateway.Options{})
	body := chargeJSON(500, gateway.MethodFlaky, "o1")
	first := testenv.MustSend(t, "POST", url+"/v1/charges", "k", body)
	if first.Status != http.StatusServiceUnavailable {
		t.Fatalf("first attempt: got %v, want 503", first)
	}
	wantCharges(t, s, "o1", 0)
	ch := mustCharge(t, url, "k", body)
	third := testenv.MustSend(t, "POST", url+"/v1/charges", "k", body)
	if third.Status != 201 || !third.Replayed() || testenv.Decode[gateway.Charge](t, third) != ch {
		t.Fatalf("third attempt: got %v, want the charge replayed", third)
	}
	// Each key has its own first attempt.
	if r := testenv.MustSend(t, "POST", url+"/v1/charges", "k-other", body); r.Status != 503 {
		t.Fatalf("another key's first attempt: got %v, want 503", r)
	}
	wantCharges(t, s, "o1", 1)
}

func TestCharges_Slow(t *testing.T) {
	const delay = 10 * time.Second
	clock, hold := testenv.NewFrozenClock(), testenv.NewHoldBack()
	s, url := gatewaytest.Start(t, gateway.Options{SlowDelay: delay, Now: clock.Now, Sleep: hold.Sleep})
	body := chargeJSON(500, gateway.MethodSlow, "o-slow")
	impatient := &http.Client{Timeout: 100 * time.Millisecond}

	for attempt := range 2 {
		_, err := testenv.Send(context.Background(), impatient, "POST", url+"/v1/charges", "k", body)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("attempt %d in the window: err %v, want a client timeout", attempt, err)
		}
		if d := <-hold.Asked(); d != delay {
			t.Fatalf("attempt %d held back %v, want %v (the window from the charge's created_at)", attempt, d, delay)
		}
	}
	// The charge was made at once, though nobody was told.
	ch := wantCharges(t, s, "o-slow", 1)[0]

	clock.Advance(delay)
	// The same impatient client now hears the answer: it comes at once.
	r, err := testenv.Send(context.Background(), impatient, "POST", url+"/v1/charges", "k", body)
	if err != nil {
		t.Fatalf("replay after the window: %v", err)
	}
	if r.Status != 201 || !r.Replayed() || testenv.Decode[gateway.Charge](t, r) != ch {
		t.Fatalf("replay after the window: got %v, want charge %s replayed", r, ch.ID)
	}
	if len(hold.Asked()) != 0 {
		t.Errorf("the replay after the window was held back %v", <-hold.Asked())
	}
	wantCharges(t, s, "o-slow", 1)
}

func TestCharges_SlowPatientClient(t *testing.T) {
	const delay = 10 * time.Second
	clock, hold := testenv.NewFrozenClock(), testenv.NewHoldBack()
	s, url := gatewaytest.Start(t, gateway.Options{SlowDelay: delay, Now: clock.Now, Sleep: hold.Sleep})
	answered := testenv.SendAsync(t.Context(), http.DefaultClient, "POST", url+"/v1/charges", "k", chargeJSON(500, gateway.MethodSlow, "o1"))

	if d := <-hold.Asked(); d != delay {
		t.Fatalf("held back %v, want %v", d, delay)
	}
	select {
	case a := <-answered:
		t.Fatalf("answered %v (%v) before the hold-back ended", a.Reply, a.Err)
	default:
	}
	hold.Release()
	a := <-answered
	if a.Err != nil || a.Reply.Status != http.StatusCreated {
		t.Fatalf("after the hold-back: %v, %v; want 201", a.Reply, a.Err)
	}
	ch := testenv.Decode[gateway.Charge](t, a.Reply)
	if got := wantCharges(t, s, "o1", 1); got[0] != ch {
		t.Fatalf("audit %+v, answered %+v", got[0], ch)
	}
}

func TestCharges_KeysRunInParallel(t *testing.T) {
	hold := testenv.NewHoldBack()
	s, url := gatewaytest.Start(t, gateway.Options{SlowDelay: time.Hour, Sleep: hold.Sleep})
	done := make(chan error, 1)
	go func() {
		_, err := testenv.Send(context.Background(), http.DefaultClient, "POST", url+"/v1/charges", "slow", chargeJSON(500, gateway.MethodSlow, "o-slow"))
		done <- err
	}()
	<-hold.Asked() // the slow key is held back, holding its own key's lock

	// Another key is answered while the slow one is still held.
	mustCharge(t, url, "fast", chargeJSON(500, gateway.MethodOK, "o-fast"))
	select {
	case err := <-done:
		t.Fatalf("the slow charge answered (%v) before its hold-back ended", err)
	default:
	}
	hold.Release()
	if err := <-done; err != nil {
		t.Fatalf("slow charge: %v", err)
	}
	wantCharges(t, s, "", 2)
}

func TestCharges_AfterCharge(t *testing.T) {
	var mu sync.Mutex
	var seen []gateway.Charge
	s, url := gatewaytest.Start(t, gateway.Options{AfterCharge: func(ch gateway.Charge) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, ch)
	}})
	ch := mustCharge(t, url, "k", chargeJSON(500, gateway.MethodOK, "o1"))
	mustCharge(t, url, "k", chargeJSON(500, gateway.MethodOK, "o1"))
	testenv.MustSend(t, "POST", url+"/v1/charges", "d", chargeJSON(500, gateway.MethodDeclined, "o1"))
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != ch {
		t.Fatalf("AfterCharge saw %+v, want only %+v", seen, ch)
	}
	wantCharges(t, s, "o1", 1)
}

// The per-key lock is what makes a second request wait for the first one's
// answer: without it, the second would replay the journaled charge while
// the first is still between journal and answer (here, held in AfterCharge).
func TestCharges_SameKeyWaitsForFirstAnswer(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s, url := gatewaytest.Start(t, gateway.Options{AfterCharge: func(gateway.Charge) {
		once.Do(func() { close(entered) })
		<-release
	}})
	var freeOnce sync.Once
	free := func() { freeOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // runs before the server's cleanup, even on failure
	body := chargeJSON(500, gateway.MethodOK, "o1")
	first, second := make(chan testenv.Reply, 1), make(chan testenv.Reply, 1)
	post := func(out chan<- testenv.Reply) {
		r, err := testenv.Send(context.Background(), http.DefaultClient, "POST", url+"/v1/charges", "k", body)
		if err != nil {
			t.Errorf("charge: %v", err)
		}
		out <- r
	}
	go post(first)
	<-entered
	go post(second)
	select {
	case r := <-second:
		t.Fatalf("second request answered %v before the first", r)
	case <-time.After(50 * time.Millisecond):
	}
	free()
	r1, r2 := <-first, <-second
	if r1.Status != 201 || r1.Replayed() || r2.Status != 201 || !r2.Replayed() || !bytes.Equal(r1.Body, r2.Body) {
		t.Fatalf("first %v (replayed %t), second %v (replayed %t)", r1, r1.Replayed(), r2, r2.Replayed())
	}
	wantCharges(t, s, "o1", 1)
}
