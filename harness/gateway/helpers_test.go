package gateway_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/testenv"
)

func chargeJSON(amount int64, method, reference string) string {
	return fmt.Sprintf(`{"amount_cents": %d, "payment_method": %q, "reference": %q}`, amount, method, reference)
}

// mustCharge posts a charge that must answer 201 and returns it.
func mustCharge(t *testing.T, url, key, body string) gateway.Charge {
	t.Helper()
	r := testenv.MustSend(t, http.MethodPost, url+"/v1/charges", key, body)
	if r.Status != http.StatusCreated {
		t.Fatalf("charge %s: got %v, want 201", key, r)
	}
	return testenv.Decode[gateway.Charge](t, r)
}

func mustRefund(t *testing.T, url, key, chargeID string) gateway.Refund {
	t.Helper()
	r := testenv.MustSend(t, http.MethodPost, url+"/v1/refunds", key, fmt.Sprintf(`{"charge_id": %q}`, chargeID))
	if r.Status != http.StatusCreated {
		t.Fatalf("refund %s: got %v, want 201", key, r)
	}
	return testenv.Decode[gateway.Refund](t, r)
}

// wantCharges checks the audit holds exactly n charges for reference.
func wantCharges(t *testing.T, s *gateway.Server, reference string, n int) []gateway.Charge {
	t.Helper()
	got := s.Charges(reference)
	if len(got) != n {
		t.Fatalf("charges for %q: got %d (%+v), want %d", reference, len(got), got, n)
	}
	return got
}
