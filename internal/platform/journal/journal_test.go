package journal_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/shop-example/shop/internal/platform/journal"
)

// entry is a provider's record in miniature: a key and what was decided.
type entry struct {
	Key    string `json:"key"`
	Amount int    `json:"amount"`
}

func (e entry) check() error {
	if e.Key == "" {
		return errors.New("incomplete entry")
	}
	return nil
}

// index is what a journal of entries is replayed into, in order.
type index struct{ entries []entry }

func (x *index) apply(e entry) { x.entries = append(x.entries, e) }

// mustOpen opens the journal at path into a fresh index; the journal is
// closed when the test ends.
func mustOpen(t *testing.T, path string) (*journal.Journal[entry], *index) {
	t.Helper()
	j, x, err := open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { j.Close() }) //nolint:errcheck // closing twice is not an error
	return j, x
}

func open(path string) (*journal.Journal[entry], *index, error) {
	x := &index{}
	j, err := journal.Open(path, journal.Options[entry]{Name: "test", Check: entry.check, Apply: x.apply,
		Logger: slog.New(slog.DiscardHandler)})
	return j, x, err
}

func mustAppend(t *testing.T, j *journal.Journal[entry], e entry) {
	t.Helper()
	if err := j.Append(e); err != nil {
		t.Fatalf("Append(%+v): %v", e, err)
	}
}

func mustClose(t *testing.T, j *journal.Journal[entry]) {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// wantEntries checks the index holds exactly want, in order.
func wantEntries(t *testing.T, x *index, want ...entry) {
	t.Helper()
	if len(x.entries) != len(want) {
		t.Fatalf("index %+v, want %+v", x.entries, want)
	}
	for i := range want {
		if x.entries[i] != want[i] {
			t.Fatalf("index %+v, want %+v", x.entries, want)
		}
	}
}

// wantFile checks the journal's bytes on disk.
func wantFile(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("journal file:\n%q\nwant\n%q", got, want)
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

// Append applies a record only once it is written, one JSON object a
// line; a restart replays the same records in the same order.
func TestJournal_AppendThenReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j1, x1 := mustOpen(t, path)
	a, b := entry{Key: "a", Amount: 1}, entry{Key: "b", Amount: 2}
	mustAppend(t, j1, a)
	mustAppend(t, j1, b)
	wantEntries(t, x1, a, b)
	mustClose(t, j1)
	wantFile(t, path, `{"key":"a","amount":1}`+"\n"+`{"key":"b","amount":2}`+"\n")

	_, x2 := mustOpen(t, path)
	wantEntries(t, x2, a, b)
}

// A last line a crash cut short was never answered: Open drops it, and the
// next record stands on a line of its own.
func TestJournal_TornLastLine(t *testing.T) {
	tests := []struct{ name, tail string }{
		{"CutShort", `{"key":"b","amo`},
		{"Garbled", "{\"key\":\"b\x00\x00\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			a, c := entry{Key: "a", Amount: 1}, entry{Key: "c", Amount: 3}
			j1, _ := mustOpen(t, path)
			mustAppend(t, j1, a)
			mustClose(t, j1)
			appendFile(t, path, tt.tail)

			j2, x2 := mustOpen(t, path)
			wantEntries(t, x2, a)
			mustAppend(t, j2, c)
			mustClose(t, j2)

			_, x3 := mustOpen(t, path)
			wantEntries(t, x3, a, c)
			wantFile(t, path, `{"key":"a","amount":1}`+"\n"+`{"key":"c","amount":3}`+"\n")
		})
	}
}

// Anything else that is not a whole, checked record is damage, not a
// crash: Open refuses to start rather than forget a decision.
func TestJournal_DamageRefusesToStart(t *testing.T) {
	good := `{"key":"a","amount":1}` + "\n"
	tests := []struct{ name, content string }{
		{"NotJSONInTheMiddle", "{not json\n" + good},
		{"FailsCheckInTheMiddle", `{"amount":5}` + "\n" + good},
		{"FailsCheckOnTheLastLine", good + `{"amount":5}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if j, _, err := open(path); err == nil {
				j.Close()
				t.Fatal("Open accepted a damaged journal")
			}
			wantFile(t, path, tt.content) // nothing cut off
		})
	}
}

// A record Apply could not use is neither written nor applied, and the
// journal goes on taking records.
func TestJournal_AppendRefusesWhatFailsCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, x := mustOpen(t, path)
	if err := j.Append(entry{Amount: 5}); err == nil {
		t.Fatal("Append accepted a record without a key")
	}
	wantEntries(t, x)
	wantFile(t, path, "")
	a := entry{Key: "a", Amount: 1}
	mustAppend(t, j, a)
	wantEntries(t, x, a)
}

// The journal's directory is created when missing (a default path such as
// data/gateway-journal.jsonl starts out without data/), and it and the
// file are private to the provider's user.
func TestJournal_CreatesTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "provider")
	path := filepath.Join(dir, "journal.jsonl")
	j1, _ := mustOpen(t, path)
	a := entry{Key: "a", Amount: 1}
	mustAppend(t, j1, a)
	mustClose(t, j1)
	for _, p := range []struct {
		path string
		perm os.FileMode
	}{{dir, 0o700}, {path, 0o600}} {
		info, err := os.Stat(p.path)
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm != p.perm {
			t.Errorf("%s: mode %o, want %o", p.path, perm, p.perm)
		}
	}
	_, x2 := mustOpen(t, path)
	wantEntries(t, x2, a)
}

func TestJournal_ClosedRefusesAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, x := mustOpen(t, path)
	mustClose(t, j)
	if err := j.Append(entry{Key: "a", Amount: 1}); err == nil {
		t.Fatal("Append after Close succeeded")
	}
	wantEntries(t, x)
	wantFile(t, path, "")
	if err := j.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestOpen_NeedsCheckAndApply(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	x := &index{}
	tests := []struct {
		name string
		opts journal.Options[entry]
	}{
		{"NoCheck", journal.Options[entry]{Apply: x.apply}},
		{"NoApply", journal.Options[entry]{Check: entry.check}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if j, err := journal.Open(path, tt.opts); err == nil {
				j.Close()
				t.Fatal("Open succeeded")
			}
		})
	}
}
