package variants

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shop-example/shop/internal/platform/layers"
)

// Edit is one change of a production statement: in a statement that
// begins with Prefix, Old becomes New.
type Edit struct {
	Prefix, Old, New string
}

// apply returns sql with the edits that match it made, and whether any
// did.
func apply(sql string, edits []Edit) (string, bool) {
	trimmed := strings.TrimSpace(sql)
	changed := false
	for _, e := range edits {
		if strings.HasPrefix(trimmed, e.Prefix) && strings.Contains(sql, e.Old) {
			sql, changed = strings.ReplaceAll(sql, e.Old, e.New), true
		}
	}
	return sql, changed
}

// Rewrite returns tx with every statement sent on it edited by edits,
// telling probe that layer was taken off each time an edit matched: the
// flow's own statements, with one condition cut out.
func Rewrite(tx pgx.Tx, layer layers.Layer, probe *layers.Probe, edits ...Edit) pgx.Tx {
	return rewritingTx{Tx: tx, layer: layer, probe: probe, edits: edits}
}

type rewritingTx struct {
	pgx.Tx
	layer layers.Layer
	probe *layers.Probe
	edits []Edit
}

func (t rewritingTx) edit(sql string) string {
	sql, changed := apply(sql, t.edits)
	if changed {
		t.probe.Took(t.layer)
	}
	return sql
}

func (t rewritingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.Tx.Exec(ctx, t.edit(sql), args...)
}

func (t rewritingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.Tx.Query(ctx, t.edit(sql), args...)
}

func (t rewritingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.Tx.QueryRow(ctx, t.edit(sql), args...)
}

func (t rewritingTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		q.SQL = t.edit(q.SQL)
	}
	return t.Tx.SendBatch(ctx, b)
}

// Edited edits the statements queued in b from its from-th on, telling
// probe that layer was taken off each time an edit matched: for a step
// that queues its statements in the flow's batch.
func Edited(b *pgx.Batch, from int, layer layers.Layer, probe *layers.Probe, edits ...Edit) {
	for _, q := range b.QueuedQueries[from:] {
		sql, changed := apply(q.SQL, edits)
		if changed {
			q.SQL = sql
			probe.Took(layer)
		}
	}
}
