package gateway

import (
	"errors"
	"fmt"
	"time"
)

// request is what an idempotency key was first used for. It is comparable,
// so "the same key with another request" is one !=; the route is part of
// it, as it is of the shop's own fingerprint.
type request struct {
	Route         string `json:"route"`
	AmountCents   int64  `json:"amount_cents,omitempty"`
	PaymentMethod string `json:"payment_method,omitempty"`
	Reference     string `json:"reference,omitempty"`
	ChargeID      string `json:"charge_id,omitempty"`
}

const (
	routeCharge = "charge"
	routeRefund = "refund"
)

// The kinds of journal record: each is one decision about one key.
const (
	kindCharged  = "charged"  // a charge was made: the key's answer
	kindDeclined = "declined" // the charge was refused for good: the key's answer
	kindFailed   = "failed"   // an attempt failed and charged nothing; the key stays open
	kindRefunded = "refunded" // a refund was made: the key's answer
)

// record is one line of the journal.
type record struct {
	Kind    string    `json:"kind"`
	Key     string    `json:"key"`
	Request request   `json:"request"`
	At      time.Time `json:"at"`
	Charge  *Charge   `json:"charge,omitempty"`
	Refund  *Refund   `json:"refund,omitempty"`
	Decline *decline  `json:"decline,omitempty"`
}

// decline is why a charge was refused.
type decline struct {
	Code   string `json:"code"` // the problem's decline_code member
	Detail string `json:"detail"`
}

// check reports whether apply can use rec: the journal refuses to write a
// record that fails it, and refuses to start from one.
func (rec record) check() error {
	var ok bool
	switch rec.Kind {
	case kindCharged:
		ok = rec.Charge != nil && rec.Charge.ID != ""
	case kindDeclined:
		ok = rec.Decline != nil
	case kindFailed:
		ok = true
	case kindRefunded:
		ok = rec.Refund != nil && rec.Refund.ChargeID != ""
	default:
		return fmt.Errorf("unknown record kind %q", rec.Kind)
	}
	if !ok || rec.Key == "" {
		return errors.New("incomplete " + rec.Kind + " record")
	}
	return nil
}

// keyState is what the gateway remembers about one key: the request it was
// first used for and, once there is one, its answer.
type keyState struct {
	request  request
	failures int      // failed attempts so far (pm_card_flaky)
	charge   *Charge  // the answer: the charge as it was when made,
	decline  *decline // or the decline,
	refund   *Refund  // or the refund
}

// ledger is the in-memory index the journal is replayed into. It is not
// safe for concurrent use: Server.mu guards it.
type ledger struct {
	keys      map[string]*keyState
	charges   []*Charge           // in creation order: the audit
	byID      map[string]*Charge  // the same charges, by id
	refundsOf map[string][]Refund // charge id → its refunds, in order
}

func newLedger() *ledger {
	return &ledger{
		keys:      map[string]*keyState{},
		byID:      map[string]*Charge{},
		refundsOf: map[string][]Refund{},
	}
}

// apply adds one checked record to the index. It is the only writer, used
// both when the journal is replayed and after each append, so a restart
// rebuilds exactly what the running process had.
func (l *ledger) apply(rec record) {
	st := l.keys[rec.Key]
	if st == nil {
		st = &keyState{request: rec.Request}
		l.keys[rec.Key] = st
	}
	switch rec.Kind {
	case kindCharged:
		answer, live := *rec.Charge, *rec.Charge
		st.charge = &answer
		l.charges = append(l.charges, &live)
		l.byID[live.ID] = &live
	case kindDeclined:
		st.decline = rec.Decline
	case kindFailed:
		st.failures++
	case kindRefunded:
		refund := *rec.Refund
		st.refund = &refund
		l.refundsOf[refund.ChargeID] = append(l.refundsOf[refund.ChargeID], refund)
		if ch := l.byID[refund.ChargeID]; ch != nil {
			ch.RefundedCents += refund.AmountCents
			if ch.RefundedCents >= ch.AmountCents {
				ch.Status = StatusRefunded
			}
		}
	}
}

// refundsFor returns a copy of the refunds of charge id, in order.
func (l *ledger) refundsFor(id string) []Refund {
	return append([]Refund{}, l.refundsOf[id]...)
}

// chargesFor returns copies of the charges with reference ("" = all), in
// creation order.
func (l *ledger) chargesFor(reference string) []Charge {
	out := []Charge{}
	for _, ch := range l.charges {
		if reference == "" || ch.Reference == reference {
			out = append(out, *ch)
		}
	}
	return out
}
