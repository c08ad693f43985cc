package gateway_test

import (
	"context"
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
