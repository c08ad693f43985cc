package mailer_test

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/harness/mailer/mailertest"
	"github.com/shop-example/shop/harness/testenv"
)

func TestAPI_Statuses(t *testing.T) {
	s, url := mailertest.Start(t, mailer.Options{})
	long := func(n int) string { return strings.Repeat("é", n) } // characters, not bytes
	body := func(reference, kind, to, subject, text string) string {
		return `{"reference": "` + reference + `", "kind": "` + kind + `", "to": "` + to +
			`", "subject": "` + subject + `", "text": "` + text + `"}`
	}
	tests := []struct {
		name, method, path, key, body string
		status                        int
		code                          string
	}{
		{"Receipt", "POST", "/v1/messages", "k-receipt", receipt("o1"), 201, ""},
		{"Ticket", "POST", "/v1/messages", "k-ticket", messageJSON("b1", mailer.KindTicket, "bo@example.com"), 201, ""},
		{"Refund", "POST", "/v1/messages", "k-refund", messageJSON("r1", mailer.KindRefund, "bo@example.com"), 201, ""},
		{"Longest", "POST", "/v1/messages", "k-long", body(long(128), "receipt", long(254), long(200), long(10000)), 201, ""},
		{"NoSubjectNoText", "POST", "/v1/messages", "k-bare", body("o2", "receipt", "a@example.com", "", ""), 201, ""},
		{"NoKey", "POST", "/v1/messages", "", receipt("o1"), 400, "idempotency_key_required"},
		{"KeyTooLong", "POST", "/v1/messages", strings.Repeat("k", 256), receipt("o1"), 400, "idempotency_key_required"},
		{"KeyNotASCII", "POST", "/v1/messages", "clé", receipt("o1"), 400, "idempotency_key_required"},
		{"NoReference", "POST", "/v1/messages", "k1", body("", "receipt", "a@example.com", "s", "t"), 400, "invalid_request"},
		{"ReferenceTooLong", "POST", "/v1/messages", "k2", body(long(129), "receipt", "a@example.com", "s", "t"), 400, "invalid_request"},
		{"BadKind", "POST", "/v1/messages", "k3", messageJSON("o1", "newsletter", "a@example.com"), 400, "invalid_request"},
		{"NoKind", "POST", "/v1/messages", "k4", messageJSON("o1", "", "a@example.com"), 400, "invalid_request"},
		{"NoTo", "POST", "/v1/messages", "k5", messageJSON("o1", "receipt", ""), 400, "invalid_request"},
		{"ToTooLong", "POST", "/v1/messages", "k6", messageJSON("o1", "receipt", long(255)), 400, "invalid_request"},
		{"SubjectTooLong", "POST", "/v1/messages", "k7", body("o1", "receipt", "a@example.com", long(201), "t"), 400, "invalid_request"},
		{"TextTooLong", "POST", "/v1/messages", "k8", body("o1", "receipt", "a@example.com", "s", long(10001)), 400, "invalid_request"},
		{"UnknownField", "POST", "/v1/messages", "k9", `{"reference": "o1", "kind": "receipt", "to": "a@example.com", "cc": "b@example.com"}`, 400, "invalid_request"},
		{"MalformedJSON", "POST", "/v1/messages", "k10", `{"reference": `, 400, "invalid_request"},
		{"WrongType", "POST", "/v1/messages", "k11", `{"reference": 7, "kind": "receipt", "to": "a@example.com"}`, 400, "invalid_request"},
		{"ListAll", "GET", "/v1/messages", "", "", 200, ""},
		{"ListByReference", "GET", "/v1/messages?reference=o1&kind=receipt", "", "", 200, ""},
		{"ListRefunds", "GET", "/v1/messages?kind=refund", "", "", 200, ""},
		{"ListBadKind", "GET", "/v1/messages?kind=newsletter", "", "", 400, "invalid_request"},
		{"GetUnknown", "GET", "/v1/messages/msg_nope", "", "", 404, "not_found"},
		{"Faults", "GET", "/v1/faults", "", "", 200, ""},
		{"Health", "GET", "/healthz", "", "", 200, ""},
		{"NoMetrics", "GET", "/metrics", "", "", 404, "not_found"},
		{"WrongMethod", "DELETE", "/v1/messages", "", "", 405, "method_not_allowed"},
		{"NoRoute", "GET", "/v1/nothing", "", "", 404, "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testenv.MustSend(t, tt.method, url+tt.path, tt.key, tt.body)
			if r.Status != tt.status || r.Problem().Code != tt.code {
				t.Fatalf("got %v, want %d %q", r, tt.status, tt.code)
			}
		})
	}
	// Only the five accepted requests sent anything.
	wantMessages(t, s, "", 5)
}

func TestMessages_Create(t *testing.T) {
	clock := testenv.NewFrozenClock()
	s, url := mailertest.Start(t, mailer.Options{Now: clock.Now})
	m := mustPost(t, url, "k", messageJSON("order-1", mailer.KindReceipt, "ann@example.com"), http.StatusCreated)
	want := mailer.Message{ID: m.ID, Reference: "order-1", Kind: mailer.KindReceipt, To: "ann@example.com",
		Subject: "Your order", Text: "Thank you.", IdempotencyKey: "k", CreatedAt: clock.Now()}
	if !strings.HasPrefix(m.ID, "msg_") || m != want {
		t.Fatalf("got %+v, want %+v", m, want)
	}
	mustPost(t, url, "k2", messageJSON("booking-1", mailer.KindTicket, "bo@example.com"), http.StatusCreated)
	if got := wantMessages(t, s, "order-1", 1); got[0] != m {
		t.Fatalf("audit %+v, answered %+v", got[0], m)
	}
	all := testenv.Decode[struct{ Items []mailer.Message }](t, testenv.MustSend(t, "GET", url+"/v1/messages", "", ""))
	if len(all.Items) != 2 || all.Items[0] != m || all.Items[1].Reference != "booking-1" {
		t.Fatalf("GET /v1/messages: %+v, want both in creation order", all.Items)
	}
	if got := testenv.Decode[mailer.Message](t, testenv.MustSend(t, "GET", url+"/v1/messages/"+m.ID, "", "")); got != m {
		t.Fatalf("GET /v1/messages/%s: %+v, want %+v", m.ID, got, m)
	}
	none := testenv.MustSend(t, "GET", url+"/v1/messages?reference=other", "", "")
	if !bytes.Equal(bytes.TrimSpace(none.Body), []byte(`{"items":[]}`)) {
		t.Fatalf("no messages: %s, want an empty list", none.Body)
	}
}

func TestMessages_ListFilters(t *testing.T) {
	_, url := mailertest.Start(t, mailer.Options{})
	r1 := mustPost(t, url, "k1", messageJSON("o1", mailer.KindReceipt, "a@example.com"), http.StatusCreated)
	t1 := mustPost(t, url, "k2", messageJSON("o1", mailer.KindTicket, "a@example.com"), http.StatusCreated)
	r2 := mustPost(t, url, "k3", messageJSON("o2", mailer.KindReceipt, "b@example.com"), http.StatusCreated)
	tests := []struct {
		query string
		want  []mailer.Message
	}{
		{"", []mailer.Message{r1, t1, r2}},
		{"?reference=o1", []mailer.Message{r1, t1}},
		{"?reference=o1&kind=ticket", []mailer.Message{t1}},
		{"?kind=receipt", []mailer.Message{r1, r2}},
		{"?reference=o2&kind=ticket", nil},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			got := testenv.Decode[struct{ Items []mailer.Message }](t, testenv.MustSend(t, "GET", url+"/v1/messages"+tt.query, "", "")).Items
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("item %d: got %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestMessages_Replay(t *testing.T) {
	s, url := mailertest.Start(t, mailer.Options{})
	first := testenv.MustSend(t, "POST", url+"/v1/messages", "k", receipt("o1"))
	if first.Status != http.StatusCreated || first.Replayed() {
		t.Fatalf("first: got %v (replayed %t), want 201", first, first.Replayed())
	}
	for i := range 2 {
		again := testenv.MustSend(t, "POST", url+"/v1/messages", "k", receipt("o1"))
		if again.Status != http.StatusOK || !again.Replayed() || !bytes.Equal(again.Body, first.Body) {
			t.Fatalf("replay %d: got %v (replayed %t), want 200 with the first message", i, again, again.Replayed())
		}
	}
	// The same request in other JSON is the same request.
	reordered := testenv.MustSend(t, "POST", url+"/v1/messages", "k",
		`{"text": "Thank you.", "to": "ann@example.com", "kind": "receipt", "subject": "Your order", "reference": "o1"}`)
	if reordered.Status != http.StatusOK || !reordered.Replayed() || !bytes.Equal(reordered.Body, first.Body) {
		t.Fatalf("reordered body: got %v, want the replayed message", reordered)
	}
	wantMessages(t, s, "o1", 1)
}

func TestMessages_KeyReused(t *testing.T) {
	s, url := mailertest.Start(t, mailer.Options{})
	mustPost(t, url, "k", receipt("o1"), http.StatusCreated)
	tests := []struct{ name, body string }{
		{"OtherReference", receipt("o2")},
		{"OtherKind", messageJSON("o1", mailer.KindTicket, "ann@example.com")},
		{"OtherTo", messageJSON("o1", mailer.KindReceipt, "bob@example.com")},
		{"OtherSubject", `{"reference": "o1", "kind": "receipt", "to": "ann@example.com", "subject": "Hi", "text": "Thank you."}`},
		{"OtherText", `{"reference": "o1", "kind": "receipt", "to": "ann@example.com", "subject": "Your order", "text": "Thanks!"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testenv.MustSend(t, "POST", url+"/v1/messages", "k", tt.body)
			if r.Status != http.StatusUnprocessableEntity || r.Problem().Code != "idempotency_key_reused" {
				t.Fatalf("got %v, want 422 idempotency_key_reused", r)
			}
		})
	}
	wantMessages(t, s, "", 1)
}

// A key is remembered for KeyTTL from the message it sent, and then
// forgotten: the same request sends a second message, and the key now
// remembers that one.
func TestMessages_KeyTTL(t *testing.T) {
	const ttl = time.Hour
	clock := testenv.NewFrozenClock()
	s, url := mailertest.Start(t, mailer.Options{KeyTTL: ttl, Now: clock.Now})
	first := mustPost(t, url, "k", receipt("o1"), http.StatusCreated)

	clock.Advance(ttl) // exactly KeyTTL old: still remembered
	if got := mustPost(t, url, "k", receipt("o1"), http.StatusOK); got != first {
		t.Fatalf("at the TTL: got %+v, want the first message %+v", got, first)
	}
	clock.Advance(time.Microsecond) // older than KeyTTL: forgotten
	second := mustPost(t, url, "k", receipt("o1"), http.StatusCreated)
	if second.ID == first.ID || second.IdempotencyKey != "k" {
		t.Fatalf("after the TTL: got %+v, want a second message under k", second)
	}
	if got := wantMessages(t, s, "o1", 2); got[0] != first || got[1] != second {
		t.Fatalf("audit %+v, want both messages in order", got)
	}
	// The key now remembers the second message, for KeyTTL from it.
	if got := mustPost(t, url, "k", receipt("o1"), http.StatusOK); got != second {
		t.Fatalf("replay after the TTL: got %+v, want the second message %+v", got, second)
	}
	// A forgotten key may carry another request; a remembered one may not.
	if r := testenv.MustSend(t, "POST", url+"/v1/messages", "k", receipt("o2")); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("another request under the remembered key: got %v, want 422", r)
	}
	clock.Advance(ttl + time.Microsecond)
	mustPost(t, url, "k", receipt("o2"), http.StatusCreated)
	wantMessages(t, s, "", 3)
}

func TestMessages_SameKeyConcurrent(t *testing.T) {
	s, url := mailertest.Start(t, mailer.Options{})
	const n = 50
	replies := make([]testenv.Reply, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			replies[i], errs[i] = testenv.Send(context.Background(), http.DefaultClient, "POST", url+"/v1/messages", "same", receipt("o-race"))
		})
	}
	wg.Wait()
	created := 0
	for i, r := range replies {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		switch {
		case r.Status == http.StatusCreated && !r.Replayed():
			created++
		case r.Status == http.StatusOK && r.Replayed():
		default:
			t.Fatalf("request %d: %v (replayed %t)", i, r, r.Replayed())
		}
		if !bytes.Equal(r.Body, replies[0].Body) {
			t.Fatalf("answers differ:\n%s\n%s", replies[0].Body, r.Body)
		}
	}
	if created != 1 {
		t.Fatalf("%d answers were 201, want 1", created)
	}
	wantMessages(t, s, "o-race", 1)
}

// waitForHolders waits until n requests hold or wait for key's lock.
func waitForHolders(t *testing.T, s *mailer.Server, key string, n int) {
	t.Helper()
	for mailer.LockHolders(s, key) < n {
		if t.Context().Err() != nil {
			t.Fatalf("never saw %d requests at key %s", n, key)
		}
		runtime.Gosched()
	}
}

// The per-key lock spans the hold-back: a second request with the key
// waits for the first one's answer, and only then replays (and is held
// back itself).
func TestMessages_SameKeyWaitsForFirstAnswer(t *testing.T) {
	hold := testenv.NewHoldBack()
	s, url := mailertest.Start(t, mailer.Options{Delay: time.Second, Sleep: hold.Sleep})
	first := postAsync(t.Context(), url, "k", receipt("o1"))
	<-hold.Asked() // the first is sent and held, holding the key's lock
	second := postAsync(t.Context(), url, "k", receipt("o1"))
	waitForHolders(t, s, "k", 2)
	if len(hold.Asked()) != 0 {
		t.Fatal("the second request reached the hold-back while the first held the key")
	}
	hold.Release()
	a1, a2 := <-first, <-second
	if a1.Err != nil || a2.Err != nil {
		t.Fatalf("first %v, second %v", a1.Err, a2.Err)
	}
	if a1.Reply.Status != 201 || a2.Reply.Status != 200 || !a2.Reply.Replayed() || !bytes.Equal(a1.Reply.Body, a2.Reply.Body) {
		t.Fatalf("first %v, second %v (replayed %t); want 201, then the same message replayed", a1.Reply, a2.Reply, a2.Reply.Replayed())
	}
	if d := <-hold.Asked(); d != time.Second {
		t.Fatalf("the replay was held back %v, want 1s", d)
	}
	wantMessages(t, s, "o1", 1)
}

func TestMessages_KeysRunInParallel(t *testing.T) {
	hold := testenv.NewHoldBack()
	s, url := mailertest.Start(t, mailer.Options{Delay: time.Second, Sleep: hold.Sleep})
	first := postAsync(t.Context(), url, "k1", receipt("o1"))
	<-hold.Asked()
	// Another key is decided, sent and held while the first is still held.
	second := postAsync(t.Context(), url, "k2", receipt("o2"))
	<-hold.Asked()
	wantMessages(t, s, "", 2)
	hold.Release()
	for _, a := range []testenv.Answer{<-first, <-second} {
		if a.Err != nil || a.Reply.Status != http.StatusCreated {
			t.Fatalf("got %v, %v; want 201", a.Reply, a.Err)
		}
	}
}
