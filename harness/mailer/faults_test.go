package mailer_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/harness/mailer/mailertest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/config"
)

// fail_rate 1 fails every new key before anything is recorded; the same
// key then sends once the rate is 0, and a replay is never failed.
func TestFaults_FailRate(t *testing.T) {
	s, url := mailertest.Start(t, mailer.Options{FailRate: 1})
	for i := range 3 {
		r := testenv.MustSend(t, "POST", url+"/v1/messages", "k", receipt("o1"))
		if r.Status != http.StatusServiceUnavailable || r.Problem().Code != "unavailable" || r.Header.Get("Retry-After") == "" {
			t.Fatalf("attempt %d at fail_rate 1: got %v, want 503 unavailable with Retry-After", i, r)
		}
	}
	wantMessages(t, s, "", 0)

	if r := testenv.MustSend(t, "PUT", url+"/v1/faults", "", `{"fail_rate": 0}`); r.Status != http.StatusOK {
		t.Fatalf("PUT /v1/faults: %v", r)
	}
	m := mustPost(t, url, "k", receipt("o1"), http.StatusCreated)

	if r := testenv.MustSend(t, "PUT", url+"/v1/faults", "", `{"fail_rate": 1}`); r.Status != http.StatusOK {
		t.Fatalf("PUT /v1/faults: %v", r)
	}
	if got := mustPost(t, url, "k", receipt("o1"), http.StatusOK); got != m {
		t.Fatalf("replay at fail_rate 1: got %+v, want %+v", got, m)
	}
	if r := testenv.MustSend(t, "POST", url+"/v1/messages", "k2", receipt("o2")); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("a new key at fail_rate 1: got %v, want 503", r)
	}
	wantMessages(t, s, "", 1)
}

// Each attempt with a new key draws once: below the rate it fails. A
// replay, a refused key and an invalid body draw nothing.
func TestFaults_FailRateDraws(t *testing.T) {
	draws := []float64{0.49, 0.5, 0.1}
	drawn := 0
	rnd := func() float64 {
		drawn++
		return draws[drawn-1]
	}
	s, url := mailertest.Start(t, mailer.Options{FailRate: 0.5, Rand: rnd})
	steps := []struct {
		name, key, body string
		status, drawn   int
	}{
		{"BelowTheRateFails", "k", receipt("o1"), http.StatusServiceUnavailable, 1},
		{"AtTheRateSends", "k", receipt("o1"), http.StatusCreated, 2},
		{"ReplayDrawsNothing", "k", receipt("o1"), http.StatusOK, 2},
		{"KeyReusedDrawsNothing", "k", receipt("o2"), http.StatusUnprocessableEntity, 2},
		{"InvalidDrawsNothing", "k2", messageJSON("o2", "fax", "a@example.com"), http.StatusBadRequest, 2},
		{"NewKeyDraws", "k2", receipt("o2"), http.StatusServiceUnavailable, 3},
	}
	for _, st := range steps {
		r := testenv.MustSend(t, "POST", url+"/v1/messages", st.key, st.body)
		if r.Status != st.status || drawn != st.drawn {
			t.Fatalf("%s: got %v after %d draws, want %d after %d", st.name, r, drawn, st.status, st.drawn)
		}
	}
	wantMessages(t, s, "", 1)
}

// delay_ms holds every message's answer after the message is journaled:
// a client that gives up during it has sent the message without hearing
// so, and its retry with the same key hears the message, not a second one.
func TestFaults_Delay(t *testing.T) {
	hold := testenv.NewHoldBack()
	s, url := mailertest.Start(t, mailer.Options{Sleep: hold.Sleep})
	if r := testenv.MustSend(t, "PUT", url+"/v1/faults", "", `{"delay_ms": 1500}`); r.Status != http.StatusOK {
		t.Fatalf("PUT /v1/faults: %v", r)
	}

	ctx, giveUp := context.WithCancel(t.Context())
	impatient := postAsync(ctx, url, "k", receipt("o1"))
	if d := <-hold.Asked(); d != 1500*time.Millisecond {
		t.Fatalf("held back %v, want 1.5s", d)
	}
	// Held: the message is sent already, and nobody has been told.
	sent := wantMessages(t, s, "o1", 1)[0]
	select {
	case a := <-impatient:
		t.Fatalf("answered %v (%v) during the hold-back", a.Reply, a.Err)
	default:
	}
	giveUp()
	if a := <-impatient; !errors.Is(a.Err, context.Canceled) {
		t.Fatalf("the client that gave up: %v, %v; want its own cancellation", a.Reply, a.Err)
	}

	// The retry is held back too, and then hears the same message.
	patient := postAsync(t.Context(), url, "k", receipt("o1"))
	if d := <-hold.Asked(); d != 1500*time.Millisecond {
		t.Fatalf("the replay was held back %v, want 1.5s", d)
	}
	hold.Release()
	a := <-patient
	if a.Err != nil || a.Reply.Status != http.StatusOK || !a.Reply.Replayed() || testenv.Decode[mailer.Message](t, a.Reply) != sent {
		t.Fatalf("retry: %v, %v; want message %s replayed", a.Reply, a.Err, sent.ID)
	}

	// With the delay off, nothing is held back.
	if r := testenv.MustSend(t, "PUT", url+"/v1/faults", "", `{}`); r.Status != http.StatusOK {
		t.Fatalf("PUT /v1/faults: %v", r)
	}
	mustPost(t, url, "k2", receipt("o2"), http.StatusCreated)
	if len(hold.Asked()) != 0 {
		t.Fatalf("held back %v with the delay off", <-hold.Asked())
	}
	wantMessages(t, s, "", 2)
}

func TestFaults_API(t *testing.T) {
	s, url := mailertest.Start(t, mailer.Options{FailRate: 0.25, Delay: 40 * time.Millisecond})
	if r := testenv.MustSend(t, "GET", url+"/v1/faults", "", ""); r.Status != 200 || string(r.Body) != `{"fail_rate":0.25,"delay_ms":40}`+"\n" {
		t.Fatalf("GET /v1/faults at start: %v, want the options", r)
	}
	tests := []struct {
		name, body string
		status     int
		want       mailer.Faults // after the PUT
	}{
		{"Both", `{"fail_rate": 0.5, "delay_ms": 250}`, 200, mailer.Faults{FailRate: 0.5, Delay: 250 * time.Millisecond}},
		{"OneIsTheOtherOff", `{"fail_rate": 1}`, 200, mailer.Faults{FailRate: 1}},
		{"EmptyIsAllOff", ``, 200, mailer.Faults{}},
		{"LongestDelay", `{"delay_ms": 20000}`, 200, mailer.Faults{Delay: mailer.MaxDelay}},
		{"RateAboveOne", `{"fail_rate": 1.5}`, 400, mailer.Faults{Delay: mailer.MaxDelay}},
		{"RateNegative", `{"fail_rate": -0.1}`, 400, mailer.Faults{Delay: mailer.MaxDelay}},
		{"DelayNegative", `{"delay_ms": -1}`, 400, mailer.Faults{Delay: mailer.MaxDelay}},
		{"DelayBeyondMax", `{"delay_ms": 20001}`, 400, mailer.Faults{Delay: mailer.MaxDelay}},
		{"DelayNotInteger", `{"delay_ms": 1.5}`, 400, mailer.Faults{Delay: mailer.MaxDelay}},
		{"UnknownField", `{"drop_rate": 0.5}`, 400, mailer.Faults{Delay: mailer.MaxDelay}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testenv.MustSend(t, "PUT", url+"/v1/faults", "", tt.body)
			if r.Status != tt.status || (tt.status == 400 && r.Problem().Code != "invalid_request") {
				t.Fatalf("got %v, want %d", r, tt.status)
			}
			if got := s.Faults(); got != tt.want {
				t.Fatalf("faults now %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNew_RefusesBadFaults(t *testing.T) {
	tests := []struct {
		name string
		opts mailer.Options
	}{
		{"RateAboveOne", mailer.Options{FailRate: 1.01}},
		{"RateNegative", mailer.Options{FailRate: -0.5}},
		{"RateNaN", mailer.Options{FailRate: math.NaN()}},
		{"DelayNegative", mailer.Options{Delay: -time.Millisecond}},
		{"DelayBeyondMax", mailer.Options{Delay: mailer.MaxDelay + time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.JournalPath = filepath.Join(t.TempDir(), "j")
			tt.opts.Logger = slog.New(slog.DiscardHandler)
			if s, err := mailer.New(tt.opts); err == nil {
				s.Close()
				t.Fatalf("New(%+v) succeeded", tt.opts)
			}
		})
	}
	s, _ := mailertest.Start(t, mailer.Options{})
	if err := s.SetFaults(mailer.Faults{FailRate: 2}); err == nil || s.Faults() != (mailer.Faults{}) {
		t.Fatalf("SetFaults(rate 2) = %v, faults now %+v; want an error and no change", err, s.Faults())
	}
}

// The config refuses SHOP_MAILER_DELAY beyond the bound New refuses.
func TestMaxDelay_IsTheConfigsBound(t *testing.T) {
	if config.MaxMailerDelay != mailer.MaxDelay {
		t.Fatalf("config.MaxMailerDelay %s, mailer.MaxDelay %s: one bound, two values", config.MaxMailerDelay, mailer.MaxDelay)
	}
}
