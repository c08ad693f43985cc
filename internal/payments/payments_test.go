package payments_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/problem"
)

func TestValidateMethod(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		ok           bool
	}{
		{"TestMethod", "pm_card_ok", true},
		{"AllowedCharacters", "AZaz09_-", true},
		{"OneCharacter", "x", true},
		{"LongestAllowed", strings.Repeat("m", payments.MaxMethodLength), true},
		{"Empty", "", false},
		{"TooLong", strings.Repeat("m", payments.MaxMethodLength+1), false},
		{"Space", "pm card", false},
		{"LeadingSpace", " pm_card_ok", false},
		{"Dot", "pm.card", false},
		{"Slash", "pm/../card", false},
		{"Newline", "pm_card_ok\n", false},
		{"NUL", "pm\x00ok", false},
		{"NonASCIILetter", "pm_card_é", false},
		{"FullwidthLetter", "pm_ｃard", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := payments.ValidateMethod(tc.method)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("ValidateMethod(%q) = %v, want nil", tc.method, err)
			case !tc.ok && problem.CodeOf(err) != problem.Invalid:
				t.Fatalf("ValidateMethod(%q) = %v, want an invalid_request problem", tc.method, err)
			case !tc.ok && !strings.Contains(err.Error(), "payment_method"):
				t.Errorf("ValidateMethod(%q) = %v: the detail does not name the field", tc.method, err)
			}
		})
	}
}

// settlement is one of the three ways a payment can be settled.
type settlement struct {
	name  string
	apply func(p *payments.Payment, now time.Time) error
	// want is the payment's status, charge, refund and reason after it.
	want payments.Payment
}

var settlements = []settlement{
	{
		name:  "Succeed",
		apply: func(p *payments.Payment, now time.Time) error { return p.Succeed("ch_1", now) },
		want:  payments.Payment{Status: payments.StatusSucceeded, ChargeID: "ch_1"},
	},
	{
		name:  "Fail",
		apply: func(p *payments.Payment, now time.Time) error { return p.Fail("the card was declined", now) },
		want:  payments.Payment{Status: payments.StatusFailed, FailureReason: "the card was declined"},
	},
	{
		name:  "Refund",
		apply: func(p *payments.Payment, now time.Time) error { return p.Refund("ch_1", "re_1", now) },
		want:  payments.Payment{Status: payments.StatusRefunded, ChargeID: "ch_1", RefundID: "re_1"},
	},
}

// processing is a payment as Begin writes it.
func processing() payments.Payment {
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	return payments.Payment{ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", OrderID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c",
		Status: payments.StatusProcessing, AmountCents: 1250, Method: "pm_card_ok", Version: 1,
		CreatedAt: created, UpdatedAt: created}
}

// TestPayment_Settle settles a processing payment each way: the outcome
// and its details are recorded, and nothing else moves.
func TestPayment_Settle(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 5, 0, 0, time.UTC)
	for _, s := range settlements {
		t.Run(s.name, func(t *testing.T) {
			p := processing()
			if err := s.apply(&p, now); err != nil {
				t.Fatalf("%s from processing: %v", s.name, err)
			}
			want := processing()
			want.Status, want.ChargeID, want.RefundID, want.FailureReason = s.want.Status, s.want.ChargeID, s.want.RefundID, s.want.FailureReason
			want.UpdatedAt = now
			if p != want {
				t.Errorf("after %s:\n got %+v\nwant %+v", s.name, p, want)
			}
		})
	}
}

// TestPayment_SettleOnce shows that an outcome is recorded once: each
// settled payment refuses every settlement, with invalid_state, and is
// left as it was.
func TestPayment_SettleOnce(t *testing.T) {
	first := time.Date(2025, 1, 2, 3, 5, 0, 0, time.UTC)
	later := first.Add(time.Minute)
	for _, settled := range settlements {
		for _, again := range settlements {
			t.Run(settled.name+"Then"+again.name, func(t *testing.T) {
				p := processing()
				if err := settled.apply(&p, first); err != nil {
					t.Fatalf("%s from processing: %v", settled.name, err)
				}
				before := p
				err := again.apply(&p, later)
				if problem.CodeOf(err) != problem.InvalidState {
					t.Fatalf("%s of a %s payment = %v, want an invalid_state problem", again.name, before.Status, err)
				}
				if !strings.Contains(err.Error(), string(before.Status)) {
					t.Errorf("%q does not give the state %s", err, before.Status)
				}
				if p != before {
					t.Errorf("the refused %s changed the payment:\n got %+v\nwant %+v", again.name, p, before)
				}
			})
		}
	}
}

func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		status  payments.Status
		wantNil bool
		code    problem.Code // the problem the client is told, if any
		unknown bool         // wraps ErrOutcomeUnknown
		detail  string       // in the message
	}{
		{status: payments.StatusSucceeded, wantNil: true},
		{status: payments.StatusFailed, code: problem.PaymentDeclined, detail: "insufficient funds"},
		{status: payments.StatusRefunded, code: problem.InvalidState, detail: "refunded"},
		{status: payments.StatusProcessing, unknown: true},
		{status: payments.Status("mystery"), unknown: true},
	} {
		t.Run(string(tc.status), func(t *testing.T) {
			p := processing()
			p.Status, p.FailureReason = tc.status, "insufficient funds"
			err := payments.Outcome(p)
			if tc.wantNil {
				if err != nil {
					t.Fatalf("Outcome = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Outcome = nil, want an error")
			}
			if got := problem.CodeOf(err); got != tc.code {
				t.Errorf("Outcome = %v: code %q, want %q", err, got, tc.code)
			}
			if got := errors.Is(err, payments.ErrOutcomeUnknown); got != tc.unknown {
				t.Errorf("Outcome = %v: errors.Is(ErrOutcomeUnknown) = %t, want %t", err, got, tc.unknown)
			}
			if tc.unknown && !strings.Contains(err.Error(), p.ID) {
				t.Errorf("Outcome = %v does not name the payment", err)
			}
			if !strings.Contains(err.Error(), tc.detail) {
				t.Errorf("Outcome = %v, want it to say %q", err, tc.detail)
			}
		})
	}
}
