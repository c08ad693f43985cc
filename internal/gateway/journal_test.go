package gateway_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/shop-example/shop/internal/gateway"
)

func TestRestart_KeepsEverything(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	s1, ts1 := newGateway(t, gateway.Options{JournalPath: path})
	ch := mustCharge(t, ts1, "c", chargeJSON(500, gateway.MethodOK, "o1"))
	kept := mustCharge(t, ts1, "c2", chargeJSON(700, gateway.MethodOK, "o2"))
	re := mustRefund(t, ts1, "r", ch.ID)
	mustSend(t, ts1, "POST", "/v1/charges", "d", chargeJSON(500, gateway.MethodDeclined, "o3"))
	if r := mustSend(t, ts1, "POST", "/v1/charges", "f", chargeJSON(500, gateway.MethodFlaky, "o4")); r.status != 503 {
		t.Fatalf("flaky first attempt: got %v", r)
	}
	before := s1.Charges("")
	ts1.Close()
	if err := s1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s2, ts2 := newGateway(t, gateway.Options{JournalPath: path})
	after := s2.Charges("")
	if len(after) != 2 || after[0] != before[0] || after[1] != before[1] || after[0].Status != gateway.StatusRefunded || after[1] != kept {
		t.Fatalf("charges after restart %+v, before %+v", after, before)
	}
	if r := mustSend(t, ts2, "POST", "/v1/charges", "c", chargeJSON(500, gateway.MethodOK, "o1")); !r.replayed() || decode[gateway.Charge](t, r) != ch {
		t.Fatalf("charge replay after restart: %v", r)
	}
	if r := mustSend(t, ts2, "POST", "/v1/charges", "c", chargeJSON(501, gateway.MethodOK, "o1")); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("key reuse after restart: %v", r)
	}
	if got := mustRefund(t, ts2, "r", ch.ID); got != re {
		t.Fatalf("refund replay after restart %+v, want %+v", got, re)
	}
	if r := mustSend(t, ts2, "POST", "/v1/refunds", "r-new", `{"charge_id": "`+ch.ID+`"}`); r.status != http.StatusConflict {
		t.Fatalf("second refund after restart: %v", r)
	}
	if r := mustSend(t, ts2, "POST", "/v1/charges", "d", chargeJSON(500, gateway.MethodDeclined, "o3")); r.status != 402 || !r.replayed() {
		t.Fatalf("decline replay after restart: %v", r)
	}
	// The flaky key's first attempt was before the restart: this is the second.
	mustCharge(t, ts2, "f", chargeJSON(500, gateway.MethodFlaky, "o4"))
	wantCharges(t, s2, "o4", 1)
}

func TestJournal_TornLastLine(t *testing.T) {
	tests := []struct{ name, tail string }{
		{"CutShort", `{"kind":"charged","key":"c2","request":{"route":"ch`},
		{"Garbled", "{\"kind\":\"char\x00\x00\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			s1, ts1 := newGateway(t, gateway.Options{JournalPath: path})
			mustCharge(t, ts1, "c1", chargeJSON(500, gateway.MethodOK, "o1"))
			ts1.Close()
			s1.Close()
			appendFile(t, path, tt.tail)

			s2, ts2 := newGateway(t, gateway.Options{JournalPath: path})
			wantCharges(t, s2, "", 1)
			mustCharge(t, ts2, "c2", chargeJSON(500, gateway.MethodOK, "o2"))
			ts2.Close()
			s2.Close()

			// The torn line was cut off, so the record after it stands on its own line.
			s3, _ := newGateway(t, gateway.Options{JournalPath: path})
			wantCharges(t, s3, "", 2)
		})
	}
}

func TestJournal_DamagedMiddleLineRefusesToStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	s1, ts1 := newGateway(t, gateway.Options{JournalPath: path})
	mustCharge(t, ts1, "c1", chargeJSON(500, gateway.MethodOK, "o1"))
	ts1.Close()
	s1.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append([]byte("{not json\n"), data...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.New(gateway.Options{JournalPath: path, Logger: slog.New(slog.DiscardHandler)}); err == nil {
		t.Fatal("New accepted a journal with a damaged line before a good one")
	}
}

func TestNew_NeedsAJournal(t *testing.T) {
	if _, err := gateway.New(gateway.Options{}); err == nil {
		t.Fatal("New without a journal path succeeded")
	}
}

// The journal's directory is created when missing (the default,
// data/gateway-journal.jsonl, starts out without data/), private to the
// gateway's user, and a restart finds the charges in it.
func TestNew_CreatesTheJournalDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "gateway")
	path := filepath.Join(dir, "journal.jsonl")
	s1, ts1 := newGateway(t, gateway.Options{JournalPath: path})
	ch := mustCharge(t, ts1, "c", chargeJSON(500, gateway.MethodOK, "o1"))
	ts1.Close()
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatalf("journal directory: %v", err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("journal directory mode %o, want 700", perm)
	}
	s2, _ := newGateway(t, gateway.Options{JournalPath: path})
	if got := s2.Charges("o1"); len(got) != 1 || got[0].ID != ch.ID {
		t.Errorf("after the restart: charges %+v, want %s", got, ch.ID)
	}
}

func TestClose_LaterWritesFail(t *testing.T) {
	s, err := gateway.New(gateway.Options{JournalPath: filepath.Join(t.TempDir(), "j"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if r := mustSend(t, ts, "POST", "/v1/charges", "k", chargeJSON(5, gateway.MethodOK, "o")); r.status != http.StatusInternalServerError {
		t.Fatalf("charge after Close: %v, want 500", r)
	}
	if len(s.Charges("")) != 0 {
		t.Fatal("a charge was recorded after Close")
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
