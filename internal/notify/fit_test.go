package notify

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/shop-example/shop/internal/platform/mail"
)

// TestMails_FitTheProvider: every mail the consumer builds, over the
// bounds of the data it is built from (an event's name of 1–200
// characters, ASCII or not; an order's or a return's 1–20 items of
// 1–64-character SKUs and quantities up to 100; a hold's 1–10 seats), is one the provider
// takes (mail.Request.Check). A name cut to fit keeps its start and ends
// with an ellipsis; one that fits is whole.
func TestMails_FitTheProvider(t *testing.T) {
	t.Parallel()
	id, user := uuid.NewString(), uuid.NewString()
	check := func(t *testing.T, m Mail) {
		t.Helper()
		r := mail.Request{Reference: m.Reference, Kind: m.Kind, To: m.To, Subject: m.Subject, Text: m.Text}
		if err := r.Check(); err != nil {
			t.Errorf("the provider refuses %q: %v", m.Subject, err)
		}
	}
	const prefix = "Your tickets for "
	room := mail.MaxSubject - utf8.RuneCountInString(prefix)
	for _, tt := range []struct {
		name  string
		event string
	}{
		{"OneCharacter", "x"},
		{"FitsExactly", strings.Repeat("n", room)},
		{"OneOver", strings.Repeat("n", room+1)},
		{"Longest", strings.Repeat("n", 200)},
		{"LongestTwoBytes", strings.Repeat("é", 200)},
		{"LongestFourBytes", strings.Repeat("🎟", 200)},
	} {
		t.Run("Ticket/"+tt.name, func(t *testing.T) {
			seats := []string{"A1", "A2", "A3", "A4", "A5", "A6", "A7", "A8", "A9", "A10"}
			m := ticket(id, user, tt.event, seats)
			check(t, m)
			fits := utf8.RuneCountInString(tt.event) <= room
			switch {
			case fits && m.Subject != prefix+tt.event:
				t.Errorf("subject %q, want the whole name", m.Subject)
			case !fits && (utf8.RuneCountInString(m.Subject) != mail.MaxSubject || !strings.HasSuffix(m.Subject, "…") ||
				!strings.HasPrefix(prefix+tt.event, strings.TrimSuffix(m.Subject, "…"))):
				t.Errorf("subject %q, want the name's start and an ellipsis, %d characters", m.Subject, mail.MaxSubject)
			}
		})
	}
	t.Run("Receipt/MostItems", func(t *testing.T) {
		skus, qtys := make([]string, 20), make([]int32, 20)
		for i := range skus {
			skus[i], qtys[i] = strings.Repeat(string(rune('A'+i)), 64), 100
		}
		check(t, receipt(id, user, 1<<62, skus, qtys))
	})
	t.Run("Refund/MostItems", func(t *testing.T) {
		skus, qtys := make([]string, 20), make([]int32, 20)
		for i := range skus {
			skus[i], qtys[i] = strings.Repeat(string(rune('A'+i)), 64), 100
		}
		check(t, refund(uuid.NewString(), id, user, 1<<62, skus, qtys))
	})
}
