package mailer_test

import (
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/harness/mailer/mailertest"
	"github.com/shop-example/shop/harness/testenv"
)

// A restart keeps every message and what each key remembers: replays,
// refusals of a reused key, and when a key is forgotten, all as before.
func TestRestart_KeepsMessagesAndKeys(t *testing.T) {
	const ttl = time.Hour
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	clock := testenv.NewFrozenClock()
	s1, url1 := mailertest.Start(t, mailer.Options{JournalPath: path, KeyTTL: ttl, Now: clock.Now})
	m1 := mustPost(t, url1, "k1", receipt("o1"), http.StatusCreated)
	m2 := mustPost(t, url1, "k2", messageJSON("b1", mailer.KindTicket, "bo@example.com"), http.StatusCreated)
	before := s1.Messages("")
	if err := s1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s2, url2 := mailertest.Start(t, mailer.Options{JournalPath: path, KeyTTL: ttl, Now: clock.Now})
	after := s2.Messages("")
	if len(after) != 2 || after[0] != before[0] || after[1] != before[1] {
		t.Fatalf("messages after restart %+v, before %+v", after, before)
	}
	if got := mustPost(t, url2, "k1", receipt("o1"), http.StatusOK); got != m1 {
		t.Fatalf("replay after restart: %+v, want %+v", got, m1)
	}
	if r := testenv.MustSend(t, "POST", url2+"/v1/messages", "k2", receipt("o1")); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("key reuse after restart: %v, want 422", r)
	}
	if got := testenv.Decode[mailer.Message](t, testenv.MustSend(t, "GET", url2+"/v1/messages/"+m2.ID, "", "")); got != m2 {
		t.Fatalf("GET after restart: %+v, want %+v", got, m2)
	}
	// The key's memory runs from the journaled created_at, not from the
	// restart.
	clock.Advance(ttl + time.Microsecond)
	again := mustPost(t, url2, "k1", receipt("o1"), http.StatusCreated)
	if err := s2.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// After a second restart, k1 remembers its second message.
	_, url3 := mailertest.Start(t, mailer.Options{JournalPath: path, KeyTTL: ttl, Now: clock.Now})
	if got := mustPost(t, url3, "k1", receipt("o1"), http.StatusOK); got != again {
		t.Fatalf("replay after the second restart: %+v, want the second message %+v", got, again)
	}
}

// The mailer refuses to start from a message it could not apply, rather
// than forget what a key sent (the journal's own damage, a torn or
// garbled line, is internal/platform/journal's to test).
func TestJournal_RefusesAMessageItCannotApply(t *testing.T) {
	tests := []struct{ name, line string }{
		{"NoKey", `{"id":"msg_x","reference":"o","kind":"receipt","to":"a@example.com","created_at":"2026-01-01T00:00:00Z"}` + "\n"},
		{"UnknownKind", `{"id":"msg_x","reference":"o","kind":"fax","to":"a","idempotency_key":"k","created_at":"2026-01-01T00:00:00Z"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			s1, url1 := mailertest.Start(t, mailer.Options{JournalPath: path})
			mustPost(t, url1, "k1", receipt("o1"), http.StatusCreated)
			s1.Close()
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, append([]byte(tt.line), data...), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := mailer.New(mailer.Options{JournalPath: path, Logger: slog.New(slog.DiscardHandler)}); err == nil {
				t.Fatal("New accepted a journal with a damaged line before a good one")
			}
		})
	}
}

func TestNew_NeedsAJournal(t *testing.T) {
	if _, err := mailer.New(mailer.Options{}); err == nil {
		t.Fatal("New without a journal path succeeded")
	}
}

func TestClose_LaterWritesFail(t *testing.T) {
	s, url := mailertest.Start(t, mailer.Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if r := testenv.MustSend(t, "POST", url+"/v1/messages", "k", receipt("o1")); r.Status != http.StatusInternalServerError {
		t.Fatalf("message after Close: %v, want 500", r)
	}
	if len(s.Messages("")) != 0 {
		t.Fatal("a message was recorded after Close")
	}
}
