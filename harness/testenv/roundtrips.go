package testenv

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// RoundTrips is a pgx tracer (ConnConfig.Tracer) that counts the
// statements and batches a pool sends: each is one round trip to the
// server. Before, if set, runs once as the Nth is about to be sent, so a
// test can change the database between two round trips of one request.
type RoundTrips struct {
	n      atomic.Int64
	before func()
	at     int64
}

// N returns the round trips counted since the last Reset.
func (r *RoundTrips) N() int64 { return r.n.Load() }

// Reset sets the count to zero.
func (r *RoundTrips) Reset() { r.n.Store(0) }

// Before runs fn once, as the nth round trip after now is about to be
// sent. The pool's calls run on the caller's goroutine, so fn does too.
func (r *RoundTrips) Before(n int64, fn func()) {
	r.Reset()
	r.at, r.before = n, fn
}

func (r *RoundTrips) count() {
	if r.n.Add(1) == r.at && r.before != nil {
		fn := r.before
		r.before = nil
		fn()
	}
}

func (r *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.count()
	return ctx
}

func (r *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.count()
	return ctx
}

func (r *RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (r *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
