package books_test

import (
	"strings"
	"testing"

	"github.com/shop-example/shop/harness/books"
)

func TestAudit(t *testing.T) {
	paid := books.Order{ID: "o1", Status: "paid"}
	succeeded := books.Payment{ID: "p1", OrderID: "o1", Status: "succeeded", AmountCents: 100, ChargeID: "ch1"}
	charge := books.Charge{ID: "ch1", Reference: "o1", Status: "succeeded", AmountCents: 100}

	for _, tc := range []struct {
		name     string
		orders   []books.Order
		payments []books.Payment
		charges  []books.Charge
		want     []string // a fragment of each problem, in order; none: balanced
		inFlight int
	}{
		{name: "Balanced",
			orders:   []books.Order{paid, {ID: "o2", Status: "cancelled"}, {ID: "o3", Status: "expired"}, {ID: "o4", Status: "pending_payment"}},
			payments: []books.Payment{succeeded, {ID: "p2", OrderID: "o2", Status: "refunded", AmountCents: 100, ChargeID: "ch2", RefundID: "re2"}, {ID: "p4", OrderID: "o4", Status: "failed", AmountCents: 100}},
			charges:  []books.Charge{charge, {ID: "ch2", Reference: "o2", Status: "refunded", AmountCents: 100}}},
		// The defect counting cannot see: one charge, one succeeded
		// payment, a paid order, and the money given back.
		{name: "PaidOrderChargeRefunded",
			orders: []books.Order{paid}, payments: []books.Payment{succeeded},
			charges: []books.Charge{{ID: "ch1", Reference: "o1", Status: "refunded", AmountCents: 100}},
			want:    []string{"paid order o1 has 0 unrefunded charges", "succeeded payment p1 records charge ch1, which the gateway has as refunded"}},
		{name: "DoubleCharge",
			orders: []books.Order{paid}, payments: []books.Payment{succeeded},
			charges: []books.Charge{charge, {ID: "ch9", Reference: "o1", Status: "succeeded", AmountCents: 100}},
			want:    []string{"paid order o1 has 2 unrefunded charges", "charge ch9 of order o1 is recorded on 0 payments"}},
		{name: "CancelledWithLiveCharge",
			orders:   []books.Order{{ID: "o2", Status: "cancelled"}},
			payments: []books.Payment{{ID: "p2", OrderID: "o2", Status: "refunded", AmountCents: 100, ChargeID: "ch2", RefundID: "re2"}},
			charges:  []books.Charge{{ID: "ch2", Reference: "o2", Status: "succeeded", AmountCents: 100}},
			want:     []string{"cancelled order o2 has 1 unrefunded charges", "refunded payment p2 records charge ch2, which the gateway has as succeeded"}},
		{name: "PaidWithoutCharge",
			orders: []books.Order{paid}, payments: []books.Payment{succeeded},
			want: []string{"paid order o1 has 0 unrefunded charges", "which the gateway does not know"}},
		{name: "ChargeOnTwoPayments",
			orders: []books.Order{paid},
			payments: []books.Payment{succeeded,
				{ID: "p2", OrderID: "o1", Status: "refunded", AmountCents: 100, ChargeID: "ch1", RefundID: "re1"}},
			charges: []books.Charge{charge},
			want:    []string{"refunded payment p2 records charge ch1, which the gateway has as succeeded", "charge ch1 of order o1 is recorded on 2 payments"}},
		{name: "WrongChargeRecorded",
			orders: []books.Order{paid}, payments: []books.Payment{{ID: "p1", OrderID: "o1", Status: "succeeded", AmountCents: 100, ChargeID: "ch2"}},
			charges: []books.Charge{charge, {ID: "ch2", Reference: "o2", Status: "refunded", AmountCents: 100}},
			want: []string{"its payment records charge \"ch2\", the gateway's live charge is ch1",
				"which the gateway has as refunded", "charge ch1 of order o1 is recorded on 0 payments", "charge ch2 is for \"o2\""}},
		{name: "InFlightIsNotJudged",
			orders:   []books.Order{{ID: "o5", Status: "pending_payment"}},
			payments: []books.Payment{{ID: "p5", OrderID: "o5", Status: "processing", AmountCents: 100}},
			charges:  []books.Charge{{ID: "ch5", Reference: "o5", Status: "succeeded", AmountCents: 100}},
			inFlight: 1},
		// What the database holds while a charge is in flight since the
		// order learned to say paying: the fault suite's audit, taken
		// while a reconciler was settling, judged it and cried wolf.
		{name: "PayingInFlightIsNotJudged",
			orders:   []books.Order{{ID: "o6", Status: "paying"}},
			payments: []books.Payment{{ID: "p6", OrderID: "o6", Status: "processing", AmountCents: 100}},
			charges:  []books.Charge{{ID: "ch6", Reference: "o6", Status: "succeeded", AmountCents: 100}},
			inFlight: 1},
		{name: "PayingWithNothingInFlight",
			orders:   []books.Order{{ID: "o7", Status: "paying"}},
			payments: []books.Payment{{ID: "p7", OrderID: "o7", Status: "succeeded", AmountCents: 100, ChargeID: "ch7"}},
			charges:  []books.Charge{{ID: "ch7", Reference: "o7", Status: "succeeded", AmountCents: 100}},
			want:     []string{"paying order o7 has 1 unrefunded charges", "paying order o7 has 1 succeeded payments"}},
		{name: "PendingWithLiveCharge",
			orders:  []books.Order{{ID: "o5", Status: "pending_payment"}},
			charges: []books.Charge{{ID: "ch5", Reference: "o5", Status: "succeeded", AmountCents: 100}},
			want:    []string{"pending_payment order o5 has 1 unrefunded charges", "recorded on 0 payments"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := books.Audit(tc.orders, tc.payments, tc.charges)
			if r.InFlight != tc.inFlight {
				t.Errorf("in flight %d, want %d", r.InFlight, tc.inFlight)
			}
			if len(r.Problems) != len(tc.want) {
				t.Fatalf("got %d problems, want %d: %s", len(r.Problems), len(tc.want), r)
			}
			for i, w := range tc.want {
				if !strings.Contains(r.Problems[i], w) {
					t.Errorf("problem %d is %q, want it to say %q", i, r.Problems[i], w)
				}
			}
			if r.OK() != (len(tc.want) == 0) {
				t.Errorf("OK() = %v with problems %v", r.OK(), r.Problems)
			}
		})
	}
}

// The money given back: the shop's refunds against the gateway's refunds
// of the order's charge, what the order holds for them, and its status.
func TestAudit_Refunds(t *testing.T) {
	pay := books.Payment{ID: "p1", OrderID: "o1", Status: "succeeded", AmountCents: 100, ChargeID: "ch1"}
	charge := func(status string, refunds ...books.ChargeRefund) books.Charge {
		c := books.Charge{ID: "ch1", Reference: "o1", Status: status, AmountCents: 100, Refunds: refunds}
		for _, r := range refunds {
			c.RefundedCents += r.AmountCents
		}
		return c
	}
	order := func(status string, refunded int64) books.Order {
		return books.Order{ID: "o1", Status: status, TotalCents: 100, RefundedCents: refunded}
	}
	re := func(id, status string, amount int64, processor string) books.Refund {
		return books.Refund{ID: id, OrderID: "o1", Status: status, AmountCents: amount, ProcessorRefundID: processor}
	}
	for _, tc := range []struct {
		name     string
		b        books.Books
		want     []string
		inFlight int
	}{
		{name: "APart",
			b: books.Books{Orders: []books.Order{order("paid", 60)}, Payments: []books.Payment{pay},
				Refunds: []books.Refund{re("r1", "succeeded", 60, "re_1"), re("r2", "failed", 60, "")},
				Charges: []books.Charge{charge("succeeded", books.ChargeRefund{ID: "re_1", AmountCents: 60})}}},
		{name: "AllOfIt",
			b: books.Books{Orders: []books.Order{order("refunded", 100)}, Payments: []books.Payment{pay},
				Refunds: []books.Refund{re("r1", "succeeded", 60, "re_1"), re("r2", "succeeded", 40, "re_2")},
				Charges: []books.Charge{charge("refunded", books.ChargeRefund{ID: "re_1", AmountCents: 60}, books.ChargeRefund{ID: "re_2", AmountCents: 40})}}},
		{name: "InFlightIsNotJudged",
			b: books.Books{Orders: []books.Order{order("paid", 100)}, Payments: []books.Payment{pay},
				Refunds: []books.Refund{re("r1", "succeeded", 60, "re_1"), re("r2", "processing", 40, "")},
				Charges: []books.Charge{charge("refunded", books.ChargeRefund{ID: "re_1", AmountCents: 60}, books.ChargeRefund{ID: "re_2", AmountCents: 40})}},
			inFlight: 1},
		// hyperswitch#13182: two refunds of 60 both went through.
		{name: "OverRefunded",
			b: books.Books{Orders: []books.Order{order("paid", 60)}, Payments: []books.Payment{pay},
				Refunds: []books.Refund{re("r1", "succeeded", 60, "re_1"), re("r2", "succeeded", 60, "re_2")},
				Charges: []books.Charge{charge("refunded", books.ChargeRefund{ID: "re_1", AmountCents: 60}, books.ChargeRefund{ID: "re_2", AmountCents: 60})}},
			want: []string{"paid order o1 has 0 unrefunded charges", "succeeded payment p1 records charge ch1, which the gateway has as refunded",
				"charge ch1 of order o1: 120 cents refunded of the 100 it took", "order o1 holds 60 cents for its refunds; its refunds not failed come to 120",
				"its refunds that succeeded cover its total"}},
		{name: "AnUnrecordedRefund",
			b: books.Books{Orders: []books.Order{order("paid", 0)}, Payments: []books.Payment{pay},
				Charges: []books.Charge{charge("succeeded", books.ChargeRefund{ID: "re_9", AmountCents: 30})}},
			want: []string{"the gateway's refund re_9 of order o1 is recorded 0 times"}},
		{name: "ARefundTheGatewayDidNotMake",
			b: books.Books{Orders: []books.Order{order("paid", 30)}, Payments: []books.Payment{pay},
				Refunds: []books.Refund{re("r1", "succeeded", 30, "re_1")}, Charges: []books.Charge{charge("succeeded")}},
			want: []string{"records processor refund \"re_1\", which the gateway did not make"}},
		{name: "AnotherAmount",
			b: books.Books{Orders: []books.Order{order("paid", 30)}, Payments: []books.Payment{pay},
				Refunds: []books.Refund{re("r1", "succeeded", 30, "re_1")}, Charges: []books.Charge{charge("succeeded", books.ChargeRefund{ID: "re_1", AmountCents: 20})}},
			want: []string{"refund r1 of 30 cents records processor refund re_1 of 20 cents"}},
		{name: "RefundedShort",
			b: books.Books{Orders: []books.Order{order("refunded", 60)}, Payments: []books.Payment{pay},
				Refunds: []books.Refund{re("r1", "succeeded", 60, "re_1")}, Charges: []books.Charge{charge("succeeded", books.ChargeRefund{ID: "re_1", AmountCents: 60})}},
			want: []string{"refunded order o1 has 1 unrefunded charges", "succeeded payment p1 records charge ch1, which the gateway has as succeeded",
				"refunded order o1: its refunds that succeeded come to 60 of its 100"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.b.Audit()
			if r.InFlight != tc.inFlight {
				t.Errorf("in flight %d, want %d", r.InFlight, tc.inFlight)
			}
			if len(r.Problems) != len(tc.want) {
				t.Fatalf("got %d problems, want %d: %s", len(r.Problems), len(tc.want), r)
			}
			for i, w := range tc.want {
				if !strings.Contains(r.Problems[i], w) {
					t.Errorf("problem %d is %q, want it to say %q", i, r.Problems[i], w)
				}
			}
		})
	}
}
