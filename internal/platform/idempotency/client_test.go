package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	dto "github.com/prometheus/client_model/go"
)

// request is what a test sends; the zero value is a POST to /v1/atomic/1
// by alice with no key.
type request struct {
	method, path, user, key, body, act, gate string
	noUser                                   bool
	ctx                                      context.Context
}

// reply is what came back.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) replayed() bool { return r.header.Get(HeaderReplayed) == "true" }

// code is the "code" member of a problem document, or "".
func (r reply) code() string {
	var doc struct{ Code string }
	_ = json.Unmarshal(r.body, &doc)
	return doc.Code
}

func (h *harness) send(r request) (reply, error) {
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.path == "" {
		r.path = atomicPath
	}
	if r.user == "" && !r.noUser {
		r.user = "alice"
	}
	if r.ctx == nil {
		r.ctx = context.Background()
	}
	req, err := http.NewRequestWithContext(r.ctx, r.method, h.srv.URL+r.path, strings.NewReader(r.body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	if r.key != "" {
		req.Header.Set(HeaderKey, r.key)
	}
	if r.user != "" {
		req.Header.Set(headerUser, r.user)
	}
	if r.act != "" {
		req.Header.Set(headerAct, r.act)
	}
	if r.gate != "" {
		req.Header.Set(headerGate, r.gate)
	}
	return do(h.srv.Client(), req)
}

func do(client *http.Client, req *http.Request) (reply, error) {
	res, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: res.StatusCode, header: res.Header, body: body}, nil
}

func (h *harness) mustSend(t *testing.T, r request) reply {
	t.Helper()
	rep, err := h.send(r)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	return rep
}

// wait waits for ch to be closed or fails the test after testDeadline.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testDeadline):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// race sends n copies of r at once and returns the replies.
func race(t *testing.T, h *harness, n int, r request) []reply {
	t.Helper()
	h.crowd.Store(int64(n))
	return raceOn(t, []*harness{h}, n, r)
}

// raceOn sends n copies of r at once, to each of hs in turn.
func raceOn(t *testing.T, hs []*harness, n int, r request) []reply {
	t.Helper()
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		replies = make([]reply, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			replies[i], errs[i] = hs[i%len(hs)].send(r)
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	return replies
}

// start sends r, which must name a gate, and returns once its handler is
// waiting there; the reply arrives on the channel when the gate opens.
func start(t *testing.T, h *harness, r request) <-chan reply {
	t.Helper()
	replies := make(chan reply, 1)
	go func() {
		rep, err := h.send(r)
		if err != nil {
			t.Errorf("send through gate %s: %v", r.gate, err)
		}
		replies <- rep
	}()
	wait(t, h.gate(r.gate).started, "the handler behind gate "+r.gate)
	return replies
}

// assertStored checks that key is the only key, completed, and that it
// replays body to the request like (by default a POST to /v1/atomic/1).
func assertStored(t *testing.T, h *harness, key string, body []byte, like ...request) {
	t.Helper()
	rows := h.rows(t)
	if r, ok := rows["alice/"+key]; len(rows) != 1 || !ok || !r.completed || !bytes.Equal(r.body, body) {
		t.Fatalf("stored keys %v, want %s completed with %s", rows, key, body)
	}
	var r request
	if len(like) > 0 {
		r = like[0]
	}
	r.key = key
	again := h.mustSend(t, r)
	if !again.replayed() || !bytes.Equal(again.body, body) {
		t.Fatalf("replay: got %d %s, want %s", again.status, again.body, body)
	}
}

// keyRow is a row of idempotency_keys.
type keyRow struct {
	status    *int
	body      []byte
	completed bool
}

func (h *harness) rows(t *testing.T) map[string]keyRow {
	t.Helper()
	rows, err := h.db.Query(context.Background(),
		`SELECT principal, key, status_code, body, completed_at IS NOT NULL FROM idempotency_keys`)
	if err != nil {
		t.Fatalf("select keys: %v", err)
	}
	defer rows.Close()
	out := map[string]keyRow{}
	for rows.Next() {
		var principal, key string
		var r keyRow
		if err := rows.Scan(&principal, &key, &r.status, &r.body, &r.completed); err != nil {
			t.Fatalf("scan key: %v", err)
		}
		out[principal+"/"+key] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("select keys: %v", err)
	}
	return out
}

// counter reads a counter's value; labels are name, value pairs.
func counter(t *testing.T, h *harness, name string, labels ...string) float64 {
	t.Helper()
	families, err := h.metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
