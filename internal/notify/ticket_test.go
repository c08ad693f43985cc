package notify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
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

func TestMain(m *testing.M) { testenv.Main(m) }

// TestHandle_LongEventNameGetsItsTicket: an event's name may be 200
// characters (events_name_length), and the ticket's subject puts a
// prefix before it. A booking of such an event gets its ticket, sent to
// the stand-in provider through the shop's client: the subject is fitted
// to the provider's 200 characters. Before it was, the provider refused
// the mail with a 400, the consumer took that as permanent, and the
// booking never got a ticket (183 characters did, 184 did not).
func TestHandle_LongEventNameGetsItsTicket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Pool(t)
	m, url := mailertest.Start(t, mailer.Options{})
	svc, err := New(Config{DB: db, Sender: provider{mail.NewClient(url, 0, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	user := testenv.Users(t, db, 1)[0]
	for _, length := range []int{183, 184, 200} {
		booking, e := mustBooking(t, db, user.ID, strings.Repeat("n", length))
		outcome, err := svc.Handle(ctx, e)
		if err != nil || outcome != outbox.Processed {
			t.Errorf("event name of %d characters: %s, %v; want the ticket sent", length, outcome, err)
			continue
		}
		sent := m.Messages(booking)
		if len(sent) != 1 || !strings.HasPrefix(sent[0].Subject, "Your tickets for nnn") {
			t.Errorf("event name of %d characters: the provider holds %+v, want one ticket", length, sent)
		}
	}
}

// TestHandle_RefusedForGoodIsRecorded: a mail the provider refuses for
// good is recorded for an operator (outbox.Failures, shop_events_failed,
// `shop events failed`) before its delivery is acknowledged, with the
// refusal and the count of deliveries refused; once a later delivery (a
// replay, after the cause was fixed) is sent, it is resolved.
func TestHandle_RefusedForGoodIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Pool(t)
	sender := &refusing{}
	svc, err := New(Config{DB: db, Sender: sender})
	if err != nil {
		t.Fatal(err)
	}
	user := testenv.Users(t, db, 1)[0]
	_, e := mustBooking(t, db, user.ID, "Concert")
	sender.refuse.Store(true)
	for range 2 {
		if _, err := svc.Handle(ctx, e); !errors.Is(err, outbox.ErrPermanent) {
			t.Fatalf("Handle = %v, want the permanent refusal", err)
		}
	}
	failures, err := outbox.Failures(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(failures) != 1 || failures[0].Event.ID != e.ID || failures[0].Consumer != Consumer || failures[0].Attempts != 2 ||
		!strings.Contains(failures[0].Error, "refused") {
		t.Fatalf("failures = %+v, want the ticket's event, refused twice", failures)
	}
	sender.refuse.Store(false)
	if outcome, err := svc.Handle(ctx, e); err != nil || outcome != outbox.Processed {
		t.Fatalf("the replay: %s, %v; want the ticket sent", outcome, err)
	}
	if failures, err := outbox.Failures(ctx, db); err != nil || len(failures) != 0 {
		t.Errorf("after the ticket was sent: failures = %+v, %v; want none", failures, err)
	}
}

// refusing is a provider that refuses every mail for good while refuse
// is set, and takes it otherwise.
type refusing struct{ refuse atomic.Bool }

func (r *refusing) Send(context.Context, string, Mail) error {
	if r.refuse.Load() {
		return fmt.Errorf("mail send: 400 invalid_request: refused: %w", outbox.ErrPermanent)
	}
	return nil
}

// mustBooking makes an event called name, a booking of seat A1 in it for
// user, and the booking's booking.confirmed.
func mustBooking(t *testing.T, db *pgxpool.Pool, user, name string) (string, outbox.Event) {
	t.Helper()
	ctx := context.Background()
	event, hold, booking := uuid.NewString(), uuid.NewString(), uuid.NewString()
	now := time.Now()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO events (id, name, rows, seats_per_row, created_at) VALUES ($1, $2, 1, 2, $3)`, []any{event, name, now}},
		{`INSERT INTO holds (id, event_id, user_id, seats, status, expires_at, version, created_at, updated_at)
			VALUES ($1, $2, $3, '{A1}', 'confirmed', $4, 1, $4, $4)`, []any{hold, event, user, now}},
		{`INSERT INTO bookings (id, hold_id, event_id, user_id, seats, created_at) VALUES ($1, $2, $3, $4, '{A1}', $5)`, []any{booking, hold, event, user, now}},
	} {
		if _, err := db.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("fixture: %v", err)
		}
	}
	e, err := outbox.New(outbox.BookingConfirmed, booking, now, map[string]string{"booking_id": booking})
	if err != nil {
		t.Fatal(err)
	}
	return booking, e
}

// provider is the shop's mail client as the consumer calls it, as the
// app wires it: a refusal is permanent.
type provider struct{ c *mail.Client }

func (p provider) Send(ctx context.Context, key string, m Mail) error {
	_, err := p.c.Send(ctx, key, mail.Request{Reference: m.Reference, Kind: m.Kind, To: m.To, Subject: m.Subject, Text: m.Text})
	if errors.Is(err, mail.ErrRejected) {
		return fmt.Errorf("%w: %w", err, outbox.ErrPermanent)
	}
	return err
}
