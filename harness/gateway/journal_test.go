package gateway_test

import (
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/gateway/gatewaytest"
	"github.com/shop-example/shop/harness/testenv"
)

func TestRestart_KeepsEverything(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	s1, url1 := gatewaytest.Start(t, gateway.Options{JournalPath: path})
	ch := mustCharge(t, url1, "c", chargeJSON(500, gateway.MethodOK, "o1"))
	kept := mustCharge(t, url1, "c2", chargeJSON(700, gateway.MethodOK, "o2"))
	re := mustRefund(t, url1, "r", ch.ID)
	testenv.MustSend(t, "POST", url1+"/v1/charges", "d", chargeJSON(500, gateway.MethodDeclined, "o3"))
	if r := testenv.MustSend(t, "POST", url1+"/v1/charges", "f", chargeJSON(500, gateway.MethodFlaky, "o4")); r.Status != 503 {
		t.Fatalf("flaky first attempt: got %v", r)
	}
	part := mustCharge(t, url1, "c3", chargeJSON(900, gateway.MethodOK, "o5"))
	if r := testenv.MustSend(t, "POST", url1+"/v1/refunds", "r-part", `{"charge_id": "`+part.ID+`", "amount_cents": 300}`); r.Status != http.StatusCreated {
		t.Fatalf("a part: %v", r)
	}
	before := s1.Charges("")
	if err := s1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s2, url2 := gatewaytest.Start(t, gateway.Options{JournalPath: path})
	after := s2.Charges("")
	if len(after) != 3 || after[0] != before[0] || after[1] != before[1] || after[0].Status != gateway.StatusRefunded || after[1] != kept ||
		after[2] != before[2] || after[2].RefundedCents != 300 || after[2].Status != gateway.StatusSucceeded {
		t.Fatalf("charges after restart %+v, before %+v", after, before)
	}
	if r := testenv.MustSend(t, "POST", url2+"/v1/charges", "c", chargeJSON(500, gateway.MethodOK, "o1")); !r.Replayed() || testenv.Decode[gateway.Charge](t, r) != ch {
		t.Fatalf("charge replay after restart: %v", r)
	}
	if r := testenv.MustSend(t, "POST", url2+"/v1/charges", "c", chargeJSON(501, gateway.MethodOK, "o1")); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("key reuse after restart: %v", r)
	}
	if got := mustRefund(t, url2, "r", ch.ID); got != re {
		t.Fatalf("refund replay after restart %+v, want %+v", got, re)
	}
	if r := testenv.MustSend(t, "POST", url2+"/v1/refunds", "r-new", `{"charge_id": "`+ch.ID+`"}`); r.Status != http.StatusConflict {
		t.Fatalf("second refund after restart: %v", r)
	}
	if r := testenv.MustSend(t, "POST", url2+"/v1/charges", "d", chargeJSON(500, gateway.MethodDeclined, "o3")); r.Status != 402 || !r.Replayed() {
		t.Fatalf("decline replay after restart: %v", r)
	}
	if r := testenv.MustSend(t, "POST", url2+"/v1/refunds", "r-part2", `{"charge_id": "`+part.ID+`", "amount_cents": 601}`); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("a part past what is left after restart: %v, want 422", r)
	}
	// The flaky key's first attempt was before the restart: this is the second.
	mustCharge(t, url2, "f", chargeJSON(500, gateway.MethodFlaky, "o4"))
	wantCharges(t, s2, "o4", 1)
}

// The gateway refuses to start from a record it could not apply, rather
// than forget a charge (the journal's own damage, a torn or garbled line,
// is internal/platform/journal's to test).
func TestJournal_RefusesARecordItCannotApply(t *testing.T) {
	const at = `"at":"2026-01-01T00:00:00Z"`
	tests := []struct {
		name, line string
		starts     bool
	}{
		{"AFailedAttempt", `{"kind":"failed","key":"k","request":{"route":"charge","amount_cents":500,"payment_method":"pm_card_flaky","reference":"o1"},` + at + `}`, true},
		{"UnknownKind", `{"kind":"voided","key":"k","request":{"route":"charge"},` + at + `}`, false},
		{"NoKey", `{"kind":"failed","key":"","request":{"route":"charge"},` + at + `}`, false},
		{"ChargedWithoutTheCharge", `{"kind":"charged","key":"k","request":{"route":"charge"},` + at + `}`, false},
		{"RefundedWithoutTheCharge", `{"kind":"refunded","key":"k","request":{"route":"refund"},` + at + `,"refund":{"id":"re_x"}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			if err := os.WriteFile(path, []byte(tt.line+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := gateway.New(gateway.Options{JournalPath: path, Logger: slog.New(slog.DiscardHandler)})
			if err == nil {
				s.Close()
			}
			if (err == nil) != tt.starts {
				t.Fatalf("New: %v, want it to start: %t", err, tt.starts)
			}
		})
	}
}

func TestNew_NeedsAJournal(t *testing.T) {
	if _, err := gateway.New(gateway.Options{}); err == nil {
		t.Fatal("New without a journal path succeeded")
	}
}

func TestClose_LaterWritesFail(t *testing.T) {
	s, url := gatewaytest.Start(t, gateway.Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if r := testenv.MustSend(t, "POST", url+"/v1/charges", "k", chargeJSON(5, gateway.MethodOK, "o")); r.Status != http.StatusInternalServerError {
		t.Fatalf("charge after Close: %v, want 500", r)
	}
	if len(s.Charges("")) != 0 {
		t.Fatal("a charge was recorded after Close")
	}
}
