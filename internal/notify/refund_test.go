package notify

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/harness/mailer/mailertest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/mail"
	"github.com/shop-example/shop/internal/platform/outbox"
)

// TestHandle_RefundMail: order.refunded is mailed to the order's owner
// (whoever asked for the refund), through the stand-in provider and the
// shop's client, as one message of kind refund about the refund, naming
// its order, its amount and the units it returned. The refund's row is
// asked before the call: a refund still processing, or one that failed,
// is mailed nothing. Its copies are one mail: the inbox stops a copy
// handled after the first, and the provider's key a copy racing it.
func TestHandle_RefundMail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Pool(t)
	m, url := mailertest.Start(t, mailer.Options{})
	svc, err := New(Config{DB: db, Sender: provider{mail.NewClient(url, 0, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	owner := testenv.Users(t, db, 1)[0]
	order := mustPaidOrder(t, db, owner.ID, "paid")

	for _, status := range []string{"processing", "failed"} {
		t.Run("Not"+strings.ToUpper(status[:1])+status[1:], func(t *testing.T) {
			r, e := mustRefund(t, db, order, status, 700, nil)
			outcome, err := svc.Handle(ctx, e)
			if err != nil || outcome != outbox.Skipped {
				t.Errorf("a %s refund: %s, %v; want it skipped", status, outcome, err)
			}
			if sent := m.Messages(r); len(sent) != 0 {
				t.Errorf("a %s refund was mailed %+v", status, sent)
			}
		})
	}
	t.Run("Succeeded", func(t *testing.T) {
		r, e := mustRefund(t, db, order, "succeeded", 2250, map[string]int{"MAIL-A": 1})
		for i := range 3 {
			outcome, err := svc.Handle(ctx, e)
			want := outbox.Processed
			if i > 0 {
				want = outbox.Duplicate
			}
			if err != nil || outcome != want {
				t.Errorf("copy %d: %s, %v; want %s", i, outcome, err, want)
			}
		}
		sent := m.Messages(r)
		if len(sent) != 1 {
			t.Fatalf("the refund's mails: %+v, want one", sent)
		}
		got := sent[0]
		if got.Kind != KindRefund || got.To != address(owner.ID) || !strings.Contains(got.Subject, order) ||
			!strings.Contains(got.Text, order) || !strings.Contains(got.Text, "22.50") || !strings.Contains(got.Text, "1 × MAIL-A") {
			t.Errorf("mail %+v, want a refund mail to the owner naming order %s, 22.50 and one MAIL-A returned", got, order)
		}
	})
	t.Run("CopiesRacing", func(t *testing.T) {
		r, e := mustRefund(t, db, order, "succeeded", 100, nil)
		done := make(chan error, 4)
		for range 4 {
			go func() { _, err := svc.Handle(ctx, e); done <- err }()
		}
		for range 4 {
			if err := <-done; err != nil {
				t.Errorf("a copy: %v", err)
			}
		}
		if sent := m.Messages(r); len(sent) != 1 {
			t.Errorf("four copies at once: %d mails, want 1", len(sent))
		}
	})
}

// TestHandle_ReceiptOfARefundedOrder: an order refunded whole before its
// order.paid was handled (the mail provider was down, the stream lost)
// was paid all the same, and gets its receipt. Before the rule named
// refunded among the paid statuses, its receipt was skipped for good,
// and its owner had a refund mail for an order never receipted.
func TestHandle_ReceiptOfARefundedOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Pool(t)
	m, url := mailertest.Start(t, mailer.Options{})
	svc, err := New(Config{DB: db, Sender: provider{mail.NewClient(url, 0, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	order := mustPaidOrder(t, db, testenv.Users(t, db, 1)[0].ID, "refunded")
	e, err := outbox.New(outbox.OrderPaid, order, time.Now(), map[string]string{"order_id": order})
	if err != nil {
		t.Fatal(err)
	}
	if outcome, err := svc.Handle(ctx, e); err != nil || outcome != outbox.Processed {
		t.Errorf("order.paid of a refunded order: %s, %v; want its receipt sent", outcome, err)
	}
	if sent := m.Messages(order); len(sent) != 1 || sent[0].Kind != KindReceipt {
		t.Errorf("the refunded order's mails: %+v, want its receipt", sent)
	}
}

// mustPaidOrder makes a product MAIL-A and an order of two of it, 4500
// cents, of user, in status, and returns the order's id.
func mustPaidOrder(t *testing.T, db *pgxpool.Pool, user, status string) string {
	t.Helper()
	ctx := context.Background()
	order, now := uuid.NewString(), time.Now()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO products (sku, name, price_cents, stock_available, created_at, updated_at) VALUES ('MAIL-A', 'A', 2250, 10, $1, $1)`, []any{now}},
		{`INSERT INTO orders (id, user_id, request_key, status, total_cents, created_at, updated_at, expires_at)
			VALUES ($1, $2, 'k', $4, 4500, $3, $3, $3)`, []any{order, user, now, status}},
		{`INSERT INTO order_items (order_id, sku, quantity, unit_price_cents) VALUES ($1, 'MAIL-A', 2, 2250)`, []any{order}},
	} {
		if _, err := db.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("fixture: %v", err)
		}
	}
	return order
}

// mustRefund records a refund of order by the admin, in status, of amount
// and returning items, and returns it and its order.refunded.
func mustRefund(t *testing.T, db *pgxpool.Pool, order, status string, amount int64, items map[string]int) (string, outbox.Event) {
	t.Helper()
	ctx := context.Background()
	id, now := uuid.NewString(), time.Now()
	var processor *string
	if status == "succeeded" {
		p := "re_" + id
		processor = &p
	}
	if _, err := db.Exec(ctx, `INSERT INTO refunds (id, order_id, request_key, requested_by, amount_cents, status, processor_refund_id, created_at, updated_at)
		VALUES ($1, $2, $7, 'admin', $3, $4, $5, $6, $6)`, id, order, amount, status, processor, now, "key-"+id); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	for sku, n := range items {
		if _, err := db.Exec(ctx, `INSERT INTO refund_items (refund_id, sku, quantity) VALUES ($1, $2, $3)`, id, sku, n); err != nil {
			t.Fatalf("fixture: %v", err)
		}
	}
	e, err := outbox.New(outbox.OrderRefunded, id, now, map[string]string{"refund_id": id, "order_id": order})
	if err != nil {
		t.Fatal(err)
	}
	return id, e
}
