package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The headers of the idempotency contract, as the stand-in providers
// (shop gateway, shop mailer) and the shop spell them.
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerReplayed       = "Idempotent-Replayed"
)

// Reply is what a stand-in provider answered.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// Replayed reports whether the answer is a key's stored one
// (Idempotent-Replayed: true).
func (r Reply) Replayed() bool { return r.Header.Get(headerReplayed) == "true" }

// Problem is the problem document of an error reply; DeclineCode is set
// on a card processor's 402.
type Problem struct {
	Code        string `json:"code"`
	Detail      string `json:"detail"`
	DeclineCode string `json:"decline_code"`
}

// Problem decodes the error body; the zero value if it is not one.
func (r Reply) Problem() Problem {
	var p Problem
	_ = json.Unmarshal(r.Body, &p)
	return p
}

func (r Reply) String() string { return fmt.Sprintf("%d %s", r.Status, r.Body) }

// Send makes one request with a JSON body; key "" sends no
// Idempotency-Key.
func Send(ctx context.Context, client *http.Client, method, url, key, body string) (Reply, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return Reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(headerIdempotencyKey, key)
	}
	res, err := client.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return Reply{}, err
	}
	return Reply{Status: res.StatusCode, Header: res.Header, Body: b}, nil
}

// MustSend is Send with http.DefaultClient; a request that gets no answer
// fails the test.
func MustSend(t testing.TB, method, url, key, body string) Reply {
	t.Helper()
	r, err := Send(context.Background(), http.DefaultClient, method, url, key, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return r
}

// Answer is the reply, or the error, of a request sent in the background.
type Answer struct {
	Reply Reply
	Err   error
}

// SendAsync sends the request of Send in the background; its answer
// arrives on the returned channel.
func SendAsync(ctx context.Context, client *http.Client, method, url, key, body string) <-chan Answer {
	out := make(chan Answer, 1)
	go func() {
		r, err := Send(ctx, client, method, url, key, body)
		out <- Answer{r, err}
	}()
	return out
}

// Decode decodes r's body into a T; a body that is not one fails the test.
func Decode[T any](t testing.TB, r Reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
	return v
}
