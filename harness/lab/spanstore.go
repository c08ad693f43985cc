package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/shop-example/shop/internal/platform/postgres"
)

// Span is what the lab keeps of a span of a race's request: enough to
// draw it, no more.
type Span struct {
	Run      string
	Request  int
	TraceID  string
	SpanID   string
	ParentID string // "" for a root
	Name     string
	Kind     string // "server", "internal", "client"
	Replica  string // the resource's service.instance.id
	Start    time.Time
	End      time.Time
	Failed   bool // status error: a transaction that rolled back, a call that failed
	// Attrs are the shop's attributes (shop.*) and the answer's status
	// (http.response.status_code); numbers come back from the store as float64.
	Attrs  map[string]any
	Events []SpanEvent
}

// SpanEvent is an event of a span: a retry, a layer that stopped the
// work, a claim.
type SpanEvent struct {
	Name  string         `json:"name"`
	At    time.Time      `json:"at"`
	Attrs map[string]any `json:"attrs,omitempty"`
}

// keptAttr reports whether the lab keeps attribute k.
func keptAttr(k attribute.Key) bool {
	return (strings.HasPrefix(string(k), "shop.") && !strings.HasPrefix(string(k), "shop.lab.")) || k == "http.response.status_code"
}

func keptAttrs(kvs []attribute.KeyValue) map[string]any {
	out := map[string]any{}
	for _, kv := range kvs {
		if keptAttr(kv.Key) {
			out[string(kv.Key)] = kv.Value.AsInterface()
		}
	}
	return out
}

// runOf is the run s belongs to (AttrRun), "" if none.
func runOf(s sdktrace.ReadOnlySpan) string {
	for _, kv := range s.Attributes() {
		if kv.Key == AttrRun {
			return kv.Value.AsString()
		}
	}
	return ""
}

// spanOf is what the lab keeps of s.
func spanOf(s sdktrace.ReadOnlySpan) Span {
	sp := Span{TraceID: s.SpanContext().TraceID().String(), SpanID: s.SpanContext().SpanID().String(),
		Name: s.Name(), Kind: s.SpanKind().String(), Start: s.StartTime(), End: s.EndTime(),
		Failed: s.Status().Code == codes.Error, Attrs: keptAttrs(s.Attributes())}
	if p := s.Parent(); p.IsValid() {
		sp.ParentID = p.SpanID().String()
	}
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case AttrRun:
			sp.Run = kv.Value.AsString()
		case AttrRequest:
			sp.Request = int(kv.Value.AsInt64())
		}
	}
	for _, e := range s.Events() {
		ev := SpanEvent{Name: e.Name, At: e.Time}
		if a := keptAttrs(e.Attributes); len(a) > 0 {
			ev.Attrs = a
		}
		sp.Events = append(sp.Events, ev)
	}
	if res := s.Resource(); res != nil {
		if v, ok := res.Set().Value(semconv.ServiceInstanceIDKey); ok {
			sp.Replica = v.AsString()
		}
	}
	return sp
}

// SpanStore is the lab's table of its races' spans, lab_spans, in the
// live copy's schema: every replica's Recorder writes there, and the lab
// that ran a race reads its spans back. Nothing else reads it, and it
// holds only the last minutes' races (DeleteBefore).
type SpanStore struct {
	db *pgxpool.Pool
}

const (
	// Replicas open the store at once, and CREATE TABLE IF NOT EXISTS is
	// not safe against itself: the lock makes the second wait and find it.
	sqlLockSpansTable = `SELECT pg_advisory_xact_lock(hashtextextended('shop-lab-spans', 0))`
	sqlCreateSpans    = `CREATE TABLE IF NOT EXISTS lab_spans (
		run       text    NOT NULL,
		request   int     NOT NULL,
		trace_id  text    NOT NULL,
		span_id   text    NOT NULL,
		parent_id text    NOT NULL,
		name      text    NOT NULL,
		kind      text    NOT NULL,
		replica   text    NOT NULL,
		start_ns  bigint  NOT NULL,
		end_ns    bigint  NOT NULL,
		failed    boolean NOT NULL,
		attrs     jsonb   NOT NULL,
		events    jsonb   NOT NULL,
		PRIMARY KEY (run, trace_id, span_id)
	)`
	sqlCountSpans        = `SELECT count(*) FILTER (WHERE kind = 'server'), count(*) FROM lab_spans WHERE run = $1`
	sqlSpansOfRun        = `SELECT request, trace_id, span_id, parent_id, name, kind, replica, start_ns, end_ns, failed, attrs, events FROM lab_spans WHERE run = $1 ORDER BY start_ns`
	sqlDeleteSpansBefore = `DELETE FROM lab_spans WHERE start_ns < $1`
)

var spanColumns = []string{"run", "request", "trace_id", "span_id", "parent_id", "name", "kind", "replica",
	"start_ns", "end_ns", "failed", "attrs", "events"}

// OpenSpanStore returns the store on db (the live copy's schema), creating
// its table the first time.
func OpenSpanStore(ctx context.Context, db *pgxpool.Pool) (*SpanStore, error) {
	err := postgres.InTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLockSpansTable); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sqlCreateSpans)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lab spans: %w", err)
	}
	return &SpanStore{db: db}, nil
}

// Write stores spans, in one COPY.
func (s *SpanStore) Write(ctx context.Context, spans []Span) error {
	_, err := s.db.CopyFrom(ctx, pgx.Identifier{"lab_spans"}, spanColumns, pgx.CopyFromSlice(len(spans), func(i int) ([]any, error) {
		sp := spans[i]
		attrs, err := json.Marshal(sp.Attrs)
		if err != nil {
			return nil, err
		}
		events, err := json.Marshal(sp.Events)
		if err != nil {
			return nil, err
		}
		return []any{sp.Run, sp.Request, sp.TraceID, sp.SpanID, sp.ParentID, sp.Name, sp.Kind, sp.Replica,
			sp.Start.UnixNano(), sp.End.UnixNano(), sp.Failed, json.RawMessage(attrs), json.RawMessage(events)}, nil
	}))
	return err
}

// Count returns how many of run's spans are stored: the requests' own
// (server spans), and all.
func (s *SpanStore) Count(ctx context.Context, run string) (requests, all int, err error) {
	err = s.db.QueryRow(ctx, sqlCountSpans, run).Scan(&requests, &all)
	return requests, all, err
}

// Spans returns run's spans, the earliest first.
func (s *SpanStore) Spans(ctx context.Context, run string) ([]Span, error) {
	rows, err := s.db.Query(ctx, sqlSpansOfRun, run)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Span
	for rows.Next() {
		sp := Span{Run: run}
		var start, end int64
		var attrs, events []byte
		if err := rows.Scan(&sp.Request, &sp.TraceID, &sp.SpanID, &sp.ParentID, &sp.Name, &sp.Kind, &sp.Replica,
			&start, &end, &sp.Failed, &attrs, &events); err != nil {
			return nil, err
		}
		sp.Start, sp.End = time.Unix(0, start), time.Unix(0, end)
		if err := json.Unmarshal(attrs, &sp.Attrs); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(events, &sp.Events); err != nil {
			return nil, err
		}
		out = append(out, sp)
	}
	return out, rows.Err()
}

// DeleteBefore deletes the spans that started before t: a race lasts
// seconds, so t a few minutes back leaves every race still running.
func (s *SpanStore) DeleteBefore(ctx context.Context, t time.Time) error {
	_, err := s.db.Exec(ctx, sqlDeleteSpansBefore, t.UnixNano())
	return err
}
