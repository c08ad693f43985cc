// Package books audits the money: it checks the shop's records of orders,
// payments and refunds against the gateway's own record of charges and
// refunds, the way an accountant reconciles a ledger with a bank
// statement.
//
// Counting charges is not enough. A run can end with as many charges as
// paid orders and still be wrong: a paid order whose only charge was
// refunded at the gateway has lost the shop its money while every count
// agrees. So the audit follows each order, each payment and each charge
// to the others and checks three rules:
//
//   - an order is paid if and only if exactly one unrefunded charge for it
//     exists at the gateway, and that charge is the one its succeeded
//     payment recorded;
//   - a cancelled or expired order (or a pending one with nothing in
//     flight) has no unrefunded charge;
//   - every charge the gateway knows is recorded on exactly one payment,
//     and that payment's status agrees with the charge's (succeeded with
//     succeeded, refunded with refunded).
//
// And for the money given back, per order:
//
//   - the refunds the shop recorded as succeeded are the refunds the
//     gateway made of the order's charge, by id and amount, and each
//     refund the gateway made of it is recorded once (by a refund, or by
//     the payment a cancel refunded);
//   - what the gateway gave back of a charge is at most what it took;
//   - the order's refunded_cents is what its refunds not failed add up to,
//     and it is refunded exactly when its refunds that succeeded cover its
//     total.
//
// An order with a payment or a refund still processing is in flight: its
// charge or its refund may not be recorded yet, so it is counted apart
// and not judged. A caller that has let everything settle expects none in
// flight.
//
// The audit is a pure function over three lists, so every caller can
// gather them its own way: the race tests read the database (FromDB), the
// compose smoke test reads the API, and all of them read the gateway over
// HTTP (FromGateway). It reads the orders and payments tables, read-only,
// as an auditor does; no flow depends on it.
package books

import (
	"fmt"
	"strings"
)

// Order is what the audit needs of an order.
type Order struct {
	ID            string
	Status        string
	TotalCents    int64
	RefundedCents int64 // what its refunds not failed hold
}

// Refund is what the audit needs of one of the shop's refunds.
type Refund struct {
	ID                string
	OrderID           string
	Status            string
	AmountCents       int64
	ProcessorRefundID string
}

// ChargeRefund is one refund the gateway made of a charge.
type ChargeRefund struct {
	ID          string `json:"id"`
	AmountCents int64  `json:"amount_cents"`
}

// Payment is what the audit needs of a payment.
type Payment struct {
	ID          string
	OrderID     string
	Status      string
	AmountCents int64
	ChargeID    string
	RefundID    string
}

// Charge is what the audit needs of one of the gateway's charges.
type Charge struct {
	ID          string `json:"id"`
	Reference   string `json:"reference"` // the order it pays
	Status      string `json:"status"`    // succeeded | refunded (given back whole)
	AmountCents int64  `json:"amount_cents"`
	// RefundedCents and Refunds are what the gateway gave back of it.
	RefundedCents int64          `json:"refunded_cents"`
	Refunds       []ChargeRefund `json:"refunds"`
}

// Books are the lists the audit reads: the shop's, and the gateway's
// charges.
type Books struct {
	Orders   []Order
	Payments []Payment
	Refunds  []Refund
	Charges  []Charge
}

// The statuses the audit reads. They are the contract's spellings
// (docs/API.md), repeated here so the audit does not trust the code it
// checks for them.
const (
	orderPaid          = "paid"
	orderFulfilled     = "fulfilled" // paid, and shipped since
	orderRefunded      = "refunded"  // its refunds that succeeded cover its total
	orderPending       = "pending_payment"
	orderPaying        = "paying" // a payment of it is in flight
	paymentProcessing  = "processing"
	paymentSucceeded   = "succeeded"
	paymentRefunded    = "refunded"
	paymentFailed      = "failed"
	chargeSucceeded    = "succeeded"
	chargeRefunded     = "refunded"
	refundProcessing   = "processing"
	refundSucceeded    = "succeeded"
	refundFailed       = "failed"
	maxProblemsDetails = 20
)

// Report is what the audit found.
type Report struct {
	Orders   int // orders audited
	Paid     int // of them paid (fulfilled since, or not)
	Payments int
	Charges  int // charges at the gateway
	Refunded int // of them refunded whole
	Refunds  int // refunds the shop recorded
	// InFlight counts orders with a payment still processing: not judged.
	InFlight int
	// Problems describes every broken rule, one line each.
	Problems []string
}

// OK reports whether the books balance.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// String is a one-line summary with the first problems, for logs and
// test failures.
func (r Report) String() string {
	s := fmt.Sprintf("books: %d orders (%d paid), %d payments, %d refunds, %d charges (%d refunded), %d in flight: ",
		r.Orders, r.Paid, r.Payments, r.Refunds, r.Charges, r.Refunded, r.InFlight)
	if r.OK() {
		return s + "balanced"
	}
	shown := r.Problems[:min(len(r.Problems), maxProblemsDetails)]
	s += fmt.Sprintf("%d problems: %s", len(r.Problems), strings.Join(shown, "; "))
	if len(r.Problems) > len(shown) {
		s += "; …"
	}
	return s
}

// Audit checks the books of orders, payments and charges with no refund
// of the shop's (Books.Audit).
func Audit(orders []Order, payments []Payment, charges []Charge) Report {
	return Books{Orders: orders, Payments: payments, Charges: charges}.Audit()
}

// Audit checks the books. Problems are reported in the order of the lists.
func (b Books) Audit() Report {
	orders, payments, charges := b.Orders, b.Payments, b.Charges
	r := Report{Orders: len(orders), Payments: len(payments), Charges: len(charges), Refunds: len(b.Refunds)}
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }

	orderByID := make(map[string]Order, len(orders))
	for _, o := range orders {
		orderByID[o.ID] = o
	}
	paymentsOf := map[string][]Payment{}
	recordedOn := map[string][]Payment{} // charge id → payments that record it
	for _, p := range payments {
		paymentsOf[p.OrderID] = append(paymentsOf[p.OrderID], p)
		if p.ChargeID != "" {
			recordedOn[p.ChargeID] = append(recordedOn[p.ChargeID], p)
		}
	}
	chargesOf := map[string][]Charge{}
	chargeByID := make(map[string]Charge, len(charges))
	for _, c := range charges {
		chargesOf[c.Reference] = append(chargesOf[c.Reference], c)
		chargeByID[c.ID] = c
		if c.Status == chargeRefunded {
			r.Refunded++
		}
	}
	inFlight := map[string]bool{}
	refundsOf := map[string][]Refund{}
	for _, f := range b.Refunds {
		refundsOf[f.OrderID] = append(refundsOf[f.OrderID], f)
		if f.Status == refundProcessing {
			inFlight[f.OrderID] = true
		}
	}

	// Each order against its payments and its charges.
	for _, o := range orders {
		var live []Charge
		for _, c := range chargesOf[o.ID] {
			if c.Status != chargeRefunded {
				live = append(live, c)
			}
		}
		var succeeded []Payment
		for _, p := range paymentsOf[o.ID] {
			switch p.Status {
			case paymentSucceeded:
				succeeded = append(succeeded, p)
			case paymentProcessing:
				inFlight[o.ID] = true
			}
		}
		if inFlight[o.ID] {
			r.InFlight++
		}
		switch {
		case o.Status == orderPaid || o.Status == orderFulfilled:
			r.Paid++
			if len(live) != 1 && !inFlight[o.ID] { // a refund in flight may have given the charge back whole
				problem("paid order %s has %d unrefunded charges at the gateway, want 1", o.ID, len(live))
			}
			if len(succeeded) != 1 {
				problem("paid order %s has %d succeeded payments, want 1", o.ID, len(succeeded))
			} else if len(live) == 1 && succeeded[0].ChargeID != live[0].ID {
				problem("paid order %s: its payment records charge %q, the gateway's live charge is %s",
					o.ID, succeeded[0].ChargeID, live[0].ID)
			}
		case (o.Status == orderPending || o.Status == orderPaying) && inFlight[o.ID]:
			// A charge may be made and not yet recorded: not judged.
		case o.Status == orderRefunded:
			// Paid, and given back whole: its one charge refunded whole.
			r.Paid++
			if len(live) != 0 {
				problem("refunded order %s has %d unrefunded charges at the gateway, want 0", o.ID, len(live))
			}
			if len(succeeded) != 1 {
				problem("refunded order %s has %d succeeded payments, want 1", o.ID, len(succeeded))
			}
		default:
			if len(live) != 0 {
				problem("%s order %s has %d unrefunded charges at the gateway, want 0", o.Status, o.ID, len(live))
			}
			if len(succeeded) != 0 {
				problem("%s order %s has %d succeeded payments, want 0", o.Status, o.ID, len(succeeded))
			}
		}
	}

	// Each payment against the charge it records.
	for _, p := range payments {
		if _, ok := orderByID[p.OrderID]; !ok {
			problem("payment %s is of order %s, which is not among the orders audited", p.ID, p.OrderID)
		}
		c, known := chargeByID[p.ChargeID]
		switch p.Status {
		case paymentSucceeded, paymentRefunded:
			want := chargeSucceeded
			if p.Status == paymentRefunded || orderByID[p.OrderID].Status == orderRefunded {
				// Given back whole: by a cancel (the payment's refund), or
				// by the order's refunds.
				want = chargeRefunded
			}
			if inFlight[p.OrderID] && p.Status == paymentSucceeded && known && c.Status == chargeRefunded {
				want = chargeRefunded // the last refund, not yet recorded
			}
			switch {
			case !known:
				problem("%s payment %s records charge %q, which the gateway does not know", p.Status, p.ID, p.ChargeID)
			case c.Status != want:
				problem("%s payment %s records charge %s, which the gateway has as %s", p.Status, p.ID, c.ID, c.Status)
			case c.Reference != p.OrderID:
				problem("payment %s of order %s records charge %s, made for order %s", p.ID, p.OrderID, c.ID, c.Reference)
			case c.AmountCents != p.AmountCents:
				problem("payment %s of %d cents records charge %s of %d cents", p.ID, p.AmountCents, c.ID, c.AmountCents)
			}
			if p.Status == paymentRefunded && p.RefundID == "" {
				problem("refunded payment %s has no refund id", p.ID)
			}
		case paymentFailed:
			if p.ChargeID != "" {
				problem("failed payment %s records charge %s", p.ID, p.ChargeID)
			}
		}
	}

	// Each charge against the payments that record it.
	for _, c := range charges {
		if _, ok := orderByID[c.Reference]; !ok {
			problem("charge %s is for %q, which is not an order audited", c.ID, c.Reference)
			continue
		}
		switch on := recordedOn[c.ID]; {
		case len(on) == 1:
		case len(on) == 0 && inFlight[c.Reference]:
			// Made for a payment still processing; recorded when it settles.
		default:
			problem("charge %s of order %s is recorded on %d payments, want 1", c.ID, c.Reference, len(on))
		}
	}
	b.auditRefunds(&r, orderByID, paymentsOf, refundsOf, chargesOf, inFlight, problem)
	return r
}

// auditRefunds checks, per order, the shop's refunds against the
// gateway's refunds of its charges, and what the order says of them.
func (b Books) auditRefunds(r *Report, orderByID map[string]Order, paymentsOf map[string][]Payment,
	refundsOf map[string][]Refund, chargesOf map[string][]Charge, inFlight map[string]bool, problem func(string, ...any)) {
	for _, o := range b.Orders {
		made := map[string]int64{} // the gateway's refunds of the order's charges, by id
		for _, c := range chargesOf[o.ID] {
			var given int64
			for _, cr := range c.Refunds {
				made[cr.ID] = cr.AmountCents
				given += cr.AmountCents
			}
			if given = max(given, c.RefundedCents); given > c.AmountCents {
				problem("charge %s of order %s: %d cents refunded of the %d it took", c.ID, o.ID, given, c.AmountCents)
			}
		}
		recorded := map[string]int{} // the gateway's refunds the shop recorded, by id
		for _, p := range paymentsOf[o.ID] {
			if p.RefundID != "" {
				recorded[p.RefundID]++
			}
		}
		var held, succeeded int64
		for _, f := range refundsOf[o.ID] {
			if f.Status != refundFailed {
				held += f.AmountCents
			}
			switch f.Status {
			case refundSucceeded:
				succeeded += f.AmountCents
				recorded[f.ProcessorRefundID]++
				switch amount, ok := made[f.ProcessorRefundID]; {
				case !ok:
					problem("refund %s of order %s records processor refund %q, which the gateway did not make of its charge", f.ID, o.ID, f.ProcessorRefundID)
				case amount != f.AmountCents:
					problem("refund %s of %d cents records processor refund %s of %d cents", f.ID, f.AmountCents, f.ProcessorRefundID, amount)
				}
			case refundFailed:
				if f.ProcessorRefundID != "" {
					problem("failed refund %s records processor refund %s", f.ID, f.ProcessorRefundID)
				}
			}
		}
		for id := range made {
			if n := recorded[id]; n != 1 && !(n == 0 && inFlight[o.ID]) {
				problem("the gateway's refund %s of order %s is recorded %d times, want 1", id, o.ID, n)
			}
		}
		if held != o.RefundedCents {
			problem("order %s holds %d cents for its refunds; its refunds not failed come to %d", o.ID, o.RefundedCents, held)
		}
		if inFlight[o.ID] {
			continue
		}
		switch whole := len(refundsOf[o.ID]) > 0 && succeeded >= o.TotalCents; {
		case whole && o.Status != orderRefunded:
			problem("%s order %s: its refunds that succeeded cover its total of %d, want refunded", o.Status, o.ID, o.TotalCents)
		case !whole && o.Status == orderRefunded:
			problem("refunded order %s: its refunds that succeeded come to %d of its %d", o.ID, succeeded, o.TotalCents)
		}
	}
	for _, f := range b.Refunds {
		if _, ok := orderByID[f.OrderID]; !ok {
			problem("refund %s is of order %s, which is not among the orders audited", f.ID, f.OrderID)
		}
	}
}
