package mailer_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/mailer"
	"github.com/shop-example/shop/internal/platform/testenv"
)

// A restart keeps every message and what each key remembers: replays,
// refusals of a reused key, and when a key is forgotten, all as before.
func TestRestart_KeepsMessagesAndKeys(t *testing.T) {
	const ttl = time.Hour
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	clock := testenv.NewFrozenClock()
	s1, ts1 := newMailer(t, mailer.Options{JournalPath: path, KeyTTL: ttl, Now: clock.Now})
	m1 := mustPost(t, ts1, "k1", receipt("o1"), http.StatusCreated)
	m2 := mustPost(t, ts1, "k2", messageJSON("b1", mailer.KindTicket, "bo@example.com"), http.StatusCreated)
	before := s1.Messages("")
	ts1.Close()
	if err := s1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s2, ts2 := newMailer(t, mailer.Options{JournalPath: path, KeyTTL: ttl, Now: clock.Now})
	after := s2.Messages("")
	if len(after) != 2 || after[0] != before[0] || after[1] != before[1] {
		t.Fatalf("messages after restart %+v, before %+v", after, before)
	}
	if got := mustPost(t, ts2, "k1", receipt("o1"), http.StatusOK); got != m1 {
		t.Fatalf("replay after restart: %+v, want %+v", got, m1)
	}
	if r := mustSend(t, ts2, "POST", "/v1/messages", "k2", receipt("o1")); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("key reuse after restart: %v, want 422", r)
	}
	if got := decode[mailer.Message](t, mustSend(t, ts2, "GET", "/v1/messages/"+m2.ID, "", "")); got != m2 {
		t.Fatalf("GET after restart: %+v, want %+v", got, m2)
	}
	// The key's memory runs from the journaled created_at, not from the
	// restart.
	clock.Advance(ttl + time.Microsecond)
	again := mustPost(t, ts2, "k1", receipt("o1"), http.StatusCreated)
	ts2.Close()
	if err := s2.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// After a second restart, k1 remembers its second message.
	_, ts3 := newMailer(t, mailer.Options{JournalPath: path, KeyTTL: ttl, Now: clock.Now})
	if got := mustPost(t, ts3, "k1", receipt("o1"), http.StatusOK); got != again {
		t.Fatalf("replay after the second restart: %+v, want the second message %+v", got, again)
	}
}

func TestJournal_TornLastLine(t *testing.T) {
	tests := []struct{ name, tail string }{
		{"CutShort", `{"id":"msg_x","reference":"o2","kind":"rec`},
		{"Garbled", "{\"id\":\"msg\x00\x00\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			s1, ts1 := newMailer(t, mailer.Options{JournalPath: path})
			mustPost(t, ts1, "k1", receipt("o1"), http.StatusCreated)
			ts1.Close()
			s1.Close()
			appendFile(t, path, tt.tail)

			s2, ts2 := newMailer(t, mailer.Options{JournalPath: path})
			wantMessages(t, s2, "", 1)
			mustPost(t, ts2, "k2", receipt("o2"), http.StatusCreated)
			ts2.Close()
			s2.Close()

			// The torn line was cut off, so the message after it stands on its own line.
			s3, _ := newMailer(t, mailer.Options{JournalPath: path})
			wantMessages(t, s3, "", 2)
		})
	}
}

func TestJournal_DamagedMiddleLineRefusesToStart(t *testing.T) {
	tests := []struct{ name, line string }{
		{"NotJSON", "{not json\n"},
		{"NoKey", `{"id":"msg_x","reference":"o","kind":"receipt","to":"a@example.com","created_at":"2026-01-01T00:00:00Z"}` + "\n"},
		{"UnknownKind", `{"id":"msg_x","reference":"o","kind":"fax","to":"a","idempotency_key":"k","created_at":"2026-01-01T00:00:00Z"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			s1, ts1 := newMailer(t, mailer.Options{JournalPath: path})
			mustPost(t, ts1, "k1", receipt("o1"), http.StatusCreated)
			ts1.Close()
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

// The journal's directory is created when missing (the default,
// data/mailer-journal.jsonl, starts out without data/), private to the
// mailer's user.
func TestNew_CreatesTheJournalDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "mailer")
	s, ts := newMailer(t, mailer.Options{JournalPath: filepath.Join(dir, "journal.jsonl")})
	mustPost(t, ts, "k", receipt("o1"), http.StatusCreated)
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatalf("journal directory: %v", err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("journal directory mode %o, want 700", perm)
	}
	wantMessages(t, s, "o1", 1)
}

func TestClose_LaterWritesFail(t *testing.T) {
	s, err := mailer.New(mailer.Options{JournalPath: filepath.Join(t.TempDir(), "j"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if r := mustSend(t, ts, "POST", "/v1/messages", "k", receipt("o1")); r.status != http.StatusInternalServerError {
		t.Fatalf("message after Close: %v, want 500", r)
	}
	if len(s.Messages("")) != 0 {
		t.Fatal("a message was recorded after Close")
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}
