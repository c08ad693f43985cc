package lab

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/postgres"
)

// labSpans are this replica's part of the race lab's waterfalls: the
// store of the races' spans, a table in the live copy's schema that every
// replica writes and the lab that ran a race reads, and the recorder that
// writes there the spans of the requests this replica's copies served
// (Recorder), registered with the tracer provider of each copy, the
// live copy and every sandbox.
//
// The recorder writes on a pool of its own, of two connections: a race
// fills the copy's pool with its requests, and a span's write must not
// take a connection one of them waits for.
type labSpans struct {
	mu       sync.Mutex
	pool     *pgxpool.Pool // nil until the first copy is built
	store    *SpanStore
	recorder *Recorder
}

// open returns the store and the recorder, opening them the first time:
// the live copy's schema, migrated (sb.open), then the table.
func (l *labSpans) open(ctx context.Context, sb *sandboxes) (*SpanStore, *Recorder, error) {
	if _, err := sb.open(ctx, liveSchema); err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.recorder != nil {
		return l.store, l.recorder, nil
	}
	u, err := sb.schemaURL(liveSchema)
	if err != nil {
		return nil, nil, err
	}
	pool, err := postgres.Open(ctx, u, 2)
	if err != nil {
		return nil, nil, err
	}
	store, err := OpenSpanStore(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	recorder, err := NewRecorder(store, RecorderOptions{Metrics: sb.a.Metrics, Logger: sb.a.deps.Logger})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	l.pool, l.store, l.recorder = pool, store, recorder
	return store, recorder, nil
}

// close writes the spans queued and stops the recorder, once the copies
// it serves have stopped.
func (l *labSpans) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.recorder != nil {
		l.recorder.Close()
		l.pool.Close()
	}
}
