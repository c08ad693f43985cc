package mailer_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/harness/mailer/mailertest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/mail"
)

var ann = mailer.Request{Reference: "o1", Kind: mailer.KindReceipt, To: "ann@example.com", Subject: "Your order", Text: "Thank you."}

func TestClient_Send(t *testing.T) {
	s, url := mailertest.Start(t, mailer.Options{})
	c := mail.NewClient(url+"/", time.Second, nil)
	m, err := c.Send(t.Context(), "k", ann)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if m.Reference != "o1" || m.IdempotencyKey != "k" || m.To != ann.To {
		t.Fatalf("Send: %+v", m)
	}
	// The same call again is the same message.
	if again, err := c.Send(t.Context(), "k", ann); err != nil || again != m {
		t.Fatalf("Send again: %+v, %v; want %+v", again, err, m)
	}
	if got := s.Messages("o1"); len(got) != 1 || got[0] != m {
		t.Fatalf("sent %+v, want only %+v", got, m)
	}
}

// Send tells the caller which failures to retry with the same key and
// which to give up on.
func TestClient_SendClassifies(t *testing.T) {
	s, url := mailertest.Start(t, mailer.Options{})
	if _, err := mail.NewClient(url, time.Second, nil).Send(t.Context(), "used", ann); err != nil {
		t.Fatal(err)
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	other := ann
	other.Reference = "o2"
	badKind := ann
	badKind.Kind = "fax"

	tests := []struct {
		name      string
		url       string
		faults    mailer.Faults
		key       string
		req       mailer.Request
		want      error
		status    int
		code      string
		wantCause error
	}{
		{name: "Unavailable", url: url, faults: mailer.Faults{FailRate: 1}, key: "new", req: ann,
			want: mail.ErrRetryable, status: 503, code: "unavailable"},
		{name: "Invalid", url: url, key: "k-bad", req: badKind,
			want: mail.ErrRejected, status: 400, code: "invalid_request"},
		{name: "NoKey", url: url, key: "", req: ann,
			want: mail.ErrRejected, status: 400, code: "idempotency_key_required"},
		{name: "KeyReused", url: url, key: "used", req: other,
			want: mail.ErrRejected, status: 422, code: "idempotency_key_reused"},
		{name: "ConnectionRefused", url: closed.URL, key: "k", req: ann,
			want: mail.ErrRetryable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.SetFaults(tt.faults); err != nil {
				t.Fatal(err)
			}
			_, err := mail.NewClient(tt.url, time.Second, nil).Send(t.Context(), tt.key, tt.req)
			other := mail.ErrRejected
			if tt.want == mail.ErrRejected {
				other = mail.ErrRetryable
			}
			var me *mail.Error
			if !errors.Is(err, tt.want) || errors.Is(err, other) || !errors.As(err, &me) {
				t.Fatalf("Send: %v; want a *mail.Error wrapping %v only", err, tt.want)
			}
			if me.Status != tt.status || me.Code != tt.code {
				t.Fatalf("Send: status %d code %q, want %d %q", me.Status, me.Code, tt.status, tt.code)
			}
		})
	}
	if got := s.Messages(""); len(got) != 1 {
		t.Fatalf("the failed calls sent %d messages, want none beyond the first", len(got)-1)
	}
}

// A call whose answer is late times out: retryable, though the message
// was sent; the retry with the same key hears it.
func TestClient_SendTimeout(t *testing.T) {
	hold := testenv.NewHoldBack()
	s, url := mailertest.Start(t, mailer.Options{Delay: time.Second, Sleep: hold.Sleep})
	impatient := mail.NewClient(url, 50*time.Millisecond, nil)
	_, err := impatient.Send(t.Context(), "k", ann)
	if !errors.Is(err, mail.ErrRetryable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send: %v, want ErrRetryable from the client's timeout", err)
	}
	sent := s.Messages("o1")
	if len(sent) != 1 {
		t.Fatalf("sent %+v, want the one message", sent)
	}
	hold.Release()
	m, err := mail.NewClient(url, 0, nil).Send(t.Context(), "k", ann)
	if err != nil || m != sent[0] {
		t.Fatalf("retry: %+v, %v; want %+v", m, err, sent[0])
	}
}

func TestClient_List(t *testing.T) {
	_, url := mailertest.Start(t, mailer.Options{})
	c := mail.NewClient(url, 0, nil)
	first, err := c.Send(t.Context(), "k1", ann)
	if err != nil {
		t.Fatal(err)
	}
	ticket := mailer.Request{Reference: "o1&x=y", Kind: mailer.KindTicket, To: "bo@example.com"}
	second, err := c.Send(t.Context(), "k2", ticket)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		reference string
		want      []mailer.Message
	}{
		{"", []mailer.Message{first, second}},
		{"o1", []mailer.Message{first}},
		{"o1&x=y", []mailer.Message{second}}, // escaped, not a second parameter
		{"nobody", []mailer.Message{}},
	}
	for _, tt := range tests {
		got, err := c.List(t.Context(), tt.reference)
		if err != nil || len(got) != len(tt.want) {
			t.Fatalf("List(%q) = %+v, %v; want %+v", tt.reference, got, err, tt.want)
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Fatalf("List(%q)[%d] = %+v, want %+v", tt.reference, i, got[i], tt.want[i])
			}
		}
	}
}
