package mailer_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/harness/testenv"
)

func messageJSON(reference, kind, to string) string {
	return fmt.Sprintf(`{"reference": %q, "kind": %q, "to": %q, "subject": "Your order", "text": "Thank you."}`, reference, kind, to)
}

// receipt is the body of a receipt for reference.
func receipt(reference string) string {
	return messageJSON(reference, mailer.KindReceipt, "ann@example.com")
}

// mustPost posts a message that must answer want and returns it.
func mustPost(t *testing.T, url, key, body string, want int) mailer.Message {
	t.Helper()
	r := testenv.MustSend(t, http.MethodPost, url+"/v1/messages", key, body)
	if r.Status != want || r.Replayed() != (want == http.StatusOK) {
		t.Fatalf("message %s: got %v (replayed %t), want %d", key, r, r.Replayed(), want)
	}
	return testenv.Decode[mailer.Message](t, r)
}

// wantMessages checks the audit holds exactly n messages for reference.
func wantMessages(t *testing.T, s *mailer.Server, reference string, n int) []mailer.Message {
	t.Helper()
	got := s.Messages(reference)
	if len(got) != n {
		t.Fatalf("messages for %q: got %d (%+v), want %d", reference, len(got), got, n)
	}
	return got
}

// postAsync posts a message in the background; its answer arrives on the
// returned channel.
func postAsync(ctx context.Context, url, key, body string) <-chan testenv.Answer {
	return testenv.SendAsync(ctx, http.DefaultClient, http.MethodPost, url+"/v1/messages", key, body)
}
