package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/internal/notify"
	"github.com/shop-example/shop/internal/platform/outbox"
)

// TestEvents_RefundsMailedOnce: every refund that succeeded gets one
// refund mail at the provider, about the refund (its reference), with its
// amount and its order, however many copies of its order.refunded
// arrive. Orders are paid and refunded over two replicas (money alone, a
// return, and for half of them the rest); then every order.refunded the
// outbox holds is published again several times, the copies of one event
// side by side in the stream, before the mail consumers of both replicas
// (four per replica) start.
func TestEvents_RefundsMailedOnce(t *testing.T) {
	const n, copies = 6, 5
	e := apptest.New(t, 2, eventVars)
	apptest.MustCreateProduct(t, e.R(0), "EVT-RF-A", 1500, 2*n)
	apptest.MustCreateProduct(t, e.R(0), "EVT-RF-B", 2000, n)

	type refunded struct{ id, order, amount string }
	var refunds []refunded
	var orders []string
	for i := range n {
		u, o := paidOrder(t, e, i, apptest.Line{SKU: "EVT-RF-A", Quantity: 2}, apptest.Line{SKU: "EVT-RF-B", Quantity: 1})
		orders = append(orders, o.ID)
		bodies := []map[string]any{
			{"amount_cents": 1200, "reason": "arrived late"},
			{"items": []apptest.Line{{SKU: "EVT-RF-A", Quantity: 1}}},
		}
		if i%2 == 0 {
			bodies = append(bodies, map[string]any{}) // the rest: the order is refunded
		}
		for k, body := range bodies {
			res := refundReq(t, e.R(i+k), u.Token, o.ID, body, apptest.NewKey())
			apptest.WantStatus(t, res, http.StatusCreated)
			r := apptest.Decode[refundJSON](t, res)
			refunds = append(refunds, refunded{id: r.ID, order: o.ID, amount: fmt.Sprintf("%d.%02d", r.AmountCents/100, r.AmountCents%100)})
		}
	}
	if got := e.Count(t, `SELECT count(*) FROM watermill_outbox WHERE payload->>'destination_topic' = $1`, outbox.OrderRefunded); got != len(refunds) {
		t.Fatalf("%d order.refunded events in the outbox, want one per refund, %d", got, len(refunds))
	}
	published := republish(t, e, outbox.OrderRefunded, copies)
	runEvents(t, e)

	// Every copy, the relay's own publish of each event and the receipts'
	// order.paid handled.
	handled := waitConsumed(t, e, notify.Consumer, published+len(refunds)+n, 30*time.Second)
	mails := func() (refundMails int) {
		for _, m := range e.Mailer.Messages("") {
			if m.Kind == notify.KindRefund {
				refundMails++
			}
		}
		return refundMails
	}
	waitFor(10*time.Second, func() bool { return mails() >= len(refunds) })
	t.Logf("%d refunds, %d copies of their order.refunded published: %d deliveries handled by the mail consumers, %d refund mails",
		len(refunds), published, handled, mails())

	if got := mails(); got != len(refunds) {
		t.Errorf("%d refund mails at the provider, want one per refund, %d", got, len(refunds))
	}
	for _, r := range refunds {
		msgs := e.Mailer.Messages(r.id)
		if len(msgs) != 1 {
			t.Errorf("refund %s: %d mails, want 1", r.id, len(msgs))
			continue
		}
		m := msgs[0]
		if m.Kind != notify.KindRefund || !strings.Contains(m.Text, r.order) || !strings.Contains(m.Text, r.amount) {
			t.Errorf("refund %s of %s to order %s: mail %+v, want a refund mail naming both", r.id, r.amount, r.order, m)
		}
	}
	if got := e.Count(t, `SELECT count(*) FROM inbox WHERE consumer = $1 AND event = $2`, notify.Consumer, outbox.OrderRefunded); got != len(refunds) {
		t.Errorf("the mail consumer's inbox holds %d order.refunded, want %d", got, len(refunds))
	}
	// The receipts are untouched: one per paid order.
	if total, missing, extra := receipts(e.Mailer, orders); missing != 0 || extra != 0 {
		t.Errorf("receipts: %d for %d paid orders (%d missing, %d extra)", total, len(orders), missing, extra)
	}
	e.AssertBooks(t)
}
