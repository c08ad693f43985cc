package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/outbox"
)

// run is one race: its target, its size and what its setup made.
type run struct {
	lab    *Lab
	target Target
	size   int
	id     string // names the run's users, product and keys
	// answered counts the race's requests that got an answer: the rows
	// its waterfall waits for.
	answered int

	tokens   []string // the users' bearer tokens
	sku      string
	orderID  string
	postID   string
	eventID  string
	orderIDs []string       // a redelivery storm's paid orders
	paid     []outbox.Event // and their order.paid events, from the outbox
}

// answer is what one request of the race got: the event "answer".
type answer struct {
	I         int     `json:"i"`
	Status    int     `json:"status"`
	Code      string  `json:"code,omitempty"`
	LatencyMS float64 `json:"latency_ms"`
	Replica   string  `json:"replica,omitempty"`
	Replayed  bool    `json:"replayed,omitempty"`
}

// Outcome is the event "outcome": the answers counted, the invariant
// checked on the database, and the metrics' moves.
type Outcome struct {
	OK       bool               `json:"ok"`
	Line     string             `json:"line"`
	Facts    map[string]int64   `json:"facts"`
	Tally    map[string]int     `json:"tally"`
	Replicas map[string]int     `json:"replicas"`
	Metrics  map[string]float64 `json:"metrics"`
	// MetricsFrom are the replicas whose counters Metrics adds up.
	MetricsFrom []string `json:"metrics_from"`
	TookMS      int64    `json:"took_ms"`
}

// request is one call of the race: an HTTP request to the target, or a
// copy of an event written to its stream.
type request struct {
	method, path string
	token, key   string
	body         any
	copyOf       *outbox.Event
	mark         *Mark // a race's request: its RunHeader
}

// check is what a scenario's invariant check found.
type check struct {
	ok    bool
	line  string
	facts map[string]int64
}

// scenario is a race: its setup, its i-th request and its invariant;
// settle, when set, waits for the work the answers set off (the
// consumers' handling of the copies) before the counters are read again.
type scenario struct {
	setup   func(ctx context.Context, r *run) error
	request func(r *run, i int) request
	settle  func(ctx context.Context, r *run) error
	check   func(ctx context.Context, r *run, tally map[string]int) (check, error)
}

func (r *run) execute(ctx context.Context, sc scenario, s *stream) (Outcome, error) {
	before, err := r.snapshot(ctx)
	if err != nil {
		return Outcome{}, err
	}
	if err := sc.setup(ctx, r); err != nil {
		return Outcome{}, fmt.Errorf("setup: %w", err)
	}
	reqs := make([]request, r.size)
	for i := range reqs {
		reqs[i] = sc.request(r, i)
	}

	// Every request waits at the gate, so they leave together. Copies of
	// events leave in one write: their consumers find them in the stream
	// together, as they find what a broker hands out again after a
	// consumer crashed or Redis failed over.
	gate := make(chan struct{})
	answers := make(chan answer, r.size)
	var wg sync.WaitGroup
	copies := copiesOf(reqs)
	if copies != nil {
		wg.Go(func() {
			<-gate
			for _, a := range r.publish(ctx, copies) {
				answers <- a
			}
		})
	} else {
		for i, q := range reqs {
			q.mark = &Mark{Run: r.id, Request: i}
			wg.Go(func() {
				<-gate
				answers <- r.send(ctx, i, q)
			})
		}
	}
	start := time.Now()
	close(gate)
	go func() { wg.Wait(); close(answers) }()

	out := Outcome{Tally: map[string]int{}, Replicas: map[string]int{}}
	for a := range answers {
		key := strconv.Itoa(a.Status)
		if a.Code != "" {
			key += " " + a.Code
		}
		if a.Replayed {
			key += " (replayed)"
		}
		out.Tally[key]++
		if a.Replica != "" {
			out.Replicas[a.Replica]++
		}
		if a.Status != 0 && copies == nil {
			r.answered++
		}
		s.send("answer", a)
	}
	if sc.settle != nil {
		if err := sc.settle(ctx, r); err != nil {
			return Outcome{}, fmt.Errorf("settle: %w", err)
		}
	}
	out.TookMS = time.Since(start).Milliseconds()

	after, err := r.snapshot(ctx)
	if err != nil {
		return Outcome{}, err
	}
	out.Metrics, out.MetricsFrom = deltas(before, after)
	if len(out.Replicas) == 0 {
		// No answer names a replica (copies of events): the replicas are
		// those whose consumers handled the copies.
		out.Replicas = handledBy(before, after)
	}
	c, err := sc.check(ctx, r, out.Tally)
	if err != nil {
		return Outcome{}, fmt.Errorf("check: %w", err)
	}
	out.OK, out.Line, out.Facts = c.ok, c.line, c.facts
	return out, nil
}

// copiesOf returns the events reqs are copies of, in order, if every one
// is a copy; else nil.
func copiesOf(reqs []request) []outbox.Event {
	copies := make([]outbox.Event, 0, len(reqs))
	for _, q := range reqs {
		if q.copyOf == nil {
			return nil
		}
		copies = append(copies, *q.copyOf)
	}
	return copies
}

// publish writes copies into the target's stream in one write. Each copy
// is an answer: 202 once the stream holds it, accepted for its consumers;
// status 0, transport_error, if the write failed.
func (r *run) publish(ctx context.Context, copies []outbox.Event) []answer {
	begin := time.Now()
	err := r.target.Events.Publish(ctx, copies...)
	out := make([]answer, len(copies))
	for i := range out {
		out[i] = answer{I: i, Status: http.StatusAccepted, LatencyMS: float64(time.Since(begin).Microseconds()) / 1000}
		if err != nil {
			out[i].Status, out[i].Code = 0, "transport_error"
		}
	}
	return out
}

// send makes one request and reads what came back. A transport error is
// status 0 with the error as its code.
func (r *run) send(ctx context.Context, i int, q request) answer {
	begin := time.Now()
	status, body, h, err := r.call(ctx, q)
	a := answer{I: i, Status: status, LatencyMS: float64(time.Since(begin).Microseconds()) / 1000}
	if err != nil {
		a.Code = "transport_error"
		return a
	}
	a.Replica = h.Get("X-Served-By")
	a.Replayed = h.Get("Idempotent-Replayed") == "true"
	if status >= 400 {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(body, &p)
		a.Code = p.Code
	}
	return a
}

// call sends q to the target and returns the status, body and headers.
func (r *run) call(ctx context.Context, q request) (int, []byte, http.Header, error) {
	var body io.Reader
	if q.body != nil {
		b, err := json.Marshal(q.body)
		if err != nil {
			return 0, nil, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, q.method, r.target.URL+q.path, body)
	if err != nil {
		return 0, nil, nil, err
	}
	for k, vs := range r.target.Header {
		req.Header[k] = vs
	}
	if q.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if q.token != "" {
		req.Header.Set("Authorization", "Bearer "+q.token)
	}
	if q.key != "" {
		req.Header.Set("Idempotency-Key", q.key)
	}
	if q.mark != nil {
		req.Header.Set(RunHeader, q.mark.header())
	}
	res, err := r.lab.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, b, res.Header, err
}

// callJSON sends q and decodes a 2xx answer into dst.
func (r *run) callJSON(ctx context.Context, q request, dst any) error {
	status, body, _, err := r.call(ctx, q)
	if err != nil {
		return fmt.Errorf("%s %s: %w", q.method, q.path, err)
	}
	if status < 200 || status > 299 {
		return fmt.Errorf("%s %s: %d %s", q.method, q.path, status, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, dst)
}

// users creates n users of the run in the target's tables, directly: the
// registration route is limited per address, and the race is about what
// comes after it.
func (r *run) users(ctx context.Context, n int) error {
	store := auth.NewStore(r.target.Pool)
	r.tokens = make([]string, n)
	var g errgroup.Group
	g.SetLimit(4)
	for i := range n {
		g.Go(func() error {
			_, token, err := store.CreateUser(ctx, fmt.Sprintf("lab-%s-%d", r.id, i))
			r.tokens[i] = token
			return err
		})
	}
	return g.Wait()
}

// runID is a short random name for a run.
func runID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
