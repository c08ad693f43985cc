package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/gateway/gatewaytest"
	"github.com/shop-example/shop/harness/testenv"
)

func TestRefunds_Create(t *testing.T) {
	s, url := gatewaytest.Start(t, gateway.Options{})
	ch := mustCharge(t, url, "c", chargeJSON(1250, gateway.MethodOK, "o1"))
	re := mustRefund(t, url, "r", ch.ID)
	if !strings.HasPrefix(re.ID, "re_") || re.ChargeID != ch.ID || re.AmountCents != 1250 ||
		re.Status != gateway.StatusSucceeded || re.CreatedAt.IsZero() {
		t.Fatalf("refund %+v", re)
	}
	if got := wantCharges(t, s, "o1", 1)[0]; got.Status != gateway.StatusRefunded {
		t.Fatalf("charge after refund: status %q, want refunded", got.Status)
	}

	t.Run("SameKeyReplays", func(t *testing.T) {
		r := testenv.MustSend(t, "POST", url+"/v1/refunds", "r", fmt.Sprintf(`{"charge_id": %q}`, ch.ID))
		if r.Status != http.StatusCreated || !r.Replayed() || testenv.Decode[gateway.Refund](t, r) != re {
			t.Fatalf("got %v, want refund %s replayed", r, re.ID)
		}
	})
	t.Run("OtherKeyConflicts", func(t *testing.T) {
		r := testenv.MustSend(t, "POST", url+"/v1/refunds", "r2", fmt.Sprintf(`{"charge_id": %q}`, ch.ID))
		if r.Status != http.StatusConflict || r.Problem().Code != "invalid_state" {
			t.Fatalf("got %v, want 409 invalid_state", r)
		}
	})
	t.Run("SameKeyOtherCharge", func(t *testing.T) {
		other := mustCharge(t, url, "c2", chargeJSON(10, gateway.MethodOK, "o2"))
		r := testenv.MustSend(t, "POST", url+"/v1/refunds", "r", fmt.Sprintf(`{"charge_id": %q}`, other.ID))
		if r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("got %v, want 422", r)
		}
	})
	t.Run("UnknownCharge", func(t *testing.T) {
		r := testenv.MustSend(t, "POST", url+"/v1/refunds", "r3", `{"charge_id": "ch_nope"}`)
		if r.Status != http.StatusNotFound {
			t.Fatalf("got %v, want 404", r)
		}
	})
	t.Run("ChargeReplayIsTheFirstAnswer", func(t *testing.T) {
		// The key's answer is the charge as it was made, not as it is now.
		again := mustCharge(t, url, "c", chargeJSON(1250, gateway.MethodOK, "o1"))
		if again != ch {
			t.Fatalf("replay %+v, want %+v", again, ch)
		}
	})
}

func TestRefunds_RaceOneWins(t *testing.T) {
	s, url := gatewaytest.Start(t, gateway.Options{})
	ch := mustCharge(t, url, "c", chargeJSON(500, gateway.MethodOK, "o1"))
	const n = 20
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := testenv.Send(context.Background(), http.DefaultClient, "POST", url+"/v1/refunds", fmt.Sprintf("r%d", i), fmt.Sprintf(`{"charge_id": %q}`, ch.ID))
			if err != nil {
				t.Errorf("refund %d: %v", i, err)
				return
			}
			statuses[i] = r.Status
		})
	}
	wg.Wait()
	won := 0
	for i, st := range statuses {
		switch st {
		case http.StatusCreated:
			won++
		case http.StatusConflict:
		default:
			t.Fatalf("refund %d: status %d", i, st)
		}
	}
	if won != 1 {
		t.Fatalf("%d refunds succeeded, want 1", won)
	}
	if got := wantCharges(t, s, "o1", 1)[0]; got.Status != gateway.StatusRefunded {
		t.Fatalf("charge status %q, want refunded", got.Status)
	}
}

// A refund of part of a charge, as processors make them: several, each
// keyed, until the charge is given back whole; never more than it took.
func TestRefunds_Partial(t *testing.T) {
	s, url := gatewaytest.Start(t, gateway.Options{})
	ch := mustCharge(t, url, "c", chargeJSON(1000, gateway.MethodOK, "o1"))
	part := func(key string, amount int64) testenv.Reply {
		return testenv.MustSend(t, "POST", url+"/v1/refunds", key, fmt.Sprintf(`{"charge_id": %q, "amount_cents": %d}`, ch.ID, amount))
	}
	first := part("r1", 600)
	if first.Status != http.StatusCreated || testenv.Decode[gateway.Refund](t, first).AmountCents != 600 {
		t.Fatalf("first part: got %v, want 201 of 600 cents", first)
	}
	if got := wantCharges(t, s, "o1", 1)[0]; got.Status != gateway.StatusSucceeded || got.RefundedCents != 600 {
		t.Fatalf("charge after a part: %+v, want succeeded with 600 refunded", got)
	}

	t.Run("BeyondTheRemainder", func(t *testing.T) {
		r := part("r2", 600)
		if r.Status != http.StatusUnprocessableEntity || r.Problem().Code != "refund_exceeds_remaining" {
			t.Fatalf("got %v, want 422 refund_exceeds_remaining", r)
		}
		var p struct {
			Remaining int64 `json:"remaining_cents"`
		}
		if err := json.Unmarshal(r.Body, &p); err != nil || p.Remaining != 400 {
			t.Fatalf("remaining_cents in %s, want 400", r.Body)
		}
	})
	t.Run("SameKeyReplays", func(t *testing.T) {
		if r := part("r1", 600); r.Status != http.StatusCreated || !r.Replayed() || testenv.Decode[gateway.Refund](t, r) != testenv.Decode[gateway.Refund](t, first) {
			t.Fatalf("got %v, want the first part replayed", r)
		}
		if r := part("r1", 601); r.Status != http.StatusUnprocessableEntity || r.Problem().Code != "idempotency_key_reused" {
			t.Fatalf("the key with another amount: got %v, want 422 idempotency_key_reused", r)
		}
	})
	t.Run("NotAPositiveAmount", func(t *testing.T) {
		for _, body := range []string{`{"charge_id": "` + ch.ID + `", "amount_cents": 0}`, `{"charge_id": "` + ch.ID + `", "amount_cents": -1}`, `{"charge_id": "` + ch.ID + `", "amount_cents": 1.5}`} {
			if r := testenv.MustSend(t, "POST", url+"/v1/refunds", "bad", body); r.Status != http.StatusBadRequest {
				t.Errorf("%s: got %v, want 400", body, r)
			}
		}
	})
	t.Run("TheRest", func(t *testing.T) {
		re := mustRefund(t, url, "r3", ch.ID) // no amount: all that is left
		if re.AmountCents != 400 {
			t.Fatalf("refund of the rest: %+v, want 400 cents", re)
		}
		if got := wantCharges(t, s, "o1", 1)[0]; got.Status != gateway.StatusRefunded || got.RefundedCents != 1000 {
			t.Fatalf("charge given back whole: %+v, want refunded", got)
		}
		if r := part("r4", 1); r.Status != http.StatusConflict || r.Problem().Code != "invalid_state" {
			t.Fatalf("a refund of a refunded charge: got %v, want 409 invalid_state", r)
		}
	})
	t.Run("Audit", func(t *testing.T) {
		var audit struct {
			Items []gateway.Audited `json:"items"`
		}
		r := testenv.MustSend(t, "GET", url+"/v1/charges?reference=o1", "", "")
		if err := json.Unmarshal(r.Body, &audit); err != nil || len(audit.Items) != 1 {
			t.Fatalf("audit: %v %v", r, err)
		}
		got := audit.Items[0]
		if got.RefundedCents != 1000 || len(got.Refunds) != 2 || got.Refunds[0].AmountCents != 600 || got.Refunds[1].AmountCents != 400 {
			t.Fatalf("audit of the charge: %+v, want 1000 refunded in 600 and 400", got)
		}
	})
}

// Two keys refunding a part each at once: the bound is the charge's, so
// of two parts that together pass it one is refused; two that fit both
// go through (the processor cannot know they are one order's mistake).
func TestRefunds_PartsRace(t *testing.T) {
	for _, tt := range []struct {
		name    string
		amount  int64
		opts    gateway.Options
		granted int
	}{
		{"PastTheCharge", 600, gateway.Options{}, 1},
		{"WithinTheCharge", 400, gateway.Options{}, 2},
		{"TheLimitOff", 600, gateway.Options{NoRefundLimit: true}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, url := gatewaytest.Start(t, tt.opts)
			ch := mustCharge(t, url, "c", chargeJSON(1000, gateway.MethodOK, "o1"))
			statuses := make([]int, 2)
			testenv.Together(2, func(i int) {
				r, err := testenv.Send(context.Background(), http.DefaultClient, "POST", url+"/v1/refunds", fmt.Sprintf("r%d", i),
					fmt.Sprintf(`{"charge_id": %q, "amount_cents": %d}`, ch.ID, tt.amount))
				if err != nil {
					t.Errorf("refund %d: %v", i, err)
					return
				}
				statuses[i] = r.Status
			})
			granted := 0
			for _, st := range statuses {
				if st == http.StatusCreated {
					granted++
				}
			}
			refunded := wantCharges(t, s, "o1", 1)[0].RefundedCents
			if granted != tt.granted || refunded != int64(granted)*tt.amount {
				t.Fatalf("statuses %v, %d refunded; want %d refunds of %d", statuses, refunded, tt.granted, tt.amount)
			}
		})
	}
}

// With its check off the processor refunds what it is asked, a charge
// given back whole included: what the shop must never ask for.
func TestRefunds_NoLimit(t *testing.T) {
	s, url := gatewaytest.Start(t, gateway.Options{NoRefundLimit: true})
	ch := mustCharge(t, url, "c", chargeJSON(500, gateway.MethodOK, "o1"))
	mustRefund(t, url, "r1", ch.ID)
	again := mustRefund(t, url, "r2", ch.ID)
	if again.AmountCents != 500 {
		t.Fatalf("second whole refund: %+v, want 500 cents again", again)
	}
	if got := wantCharges(t, s, "o1", 1)[0]; got.RefundedCents != 1000 || len(s.Refunds(ch.ID)) != 2 {
		t.Fatalf("charge %+v with %d refunds, want 1000 refunded in two", got, len(s.Refunds(ch.ID)))
	}
}
