package variants

import (
	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/refunds"
)

// Refunds returns the refunds' rows with the layers that off takes off
// and that live in them: the order's advisory lock (NoOrderLock), the
// version check of the refund's settle (UnversionedRefunds).
func Refunds(rows refunds.RefundRows, off layers.Set, probe *layers.Probe) refunds.RefundRows {
	if isOff(off, layers.Version) {
		rows = UnversionedRefunds{RefundRows: rows, Probe: probe}
	}
	if isOff(off, layers.Lock) {
		rows = NoOrderLock{RefundRows: rows, Probe: probe}
	}
	return rows
}

// NoOrderLock is the refund flow's lock taken off: the order's advisory
// lock is never queued, and refunds of one order begin side by side, each
// on the order as it read it.
type NoOrderLock struct {
	refunds.RefundRows
	Probe *layers.Probe
}

// QueueLockOrder queues nothing.
func (n NoOrderLock) QueueLockOrder(*pgx.Batch, string) { n.Probe.Took(layers.Lock) }

// UnversionedRefunds settle a refund whatever settled it since it was
// read: two settlers of one refund both write.
type UnversionedRefunds struct {
	refunds.RefundRows
	Probe *layers.Probe
}

var refundVersion = Edit{Prefix: "UPDATE refunds", Old: "WHERE id = $1 AND version = $2", New: "WHERE id = $1 AND $2::bigint IS NOT NULL"}

// QueueSettle queues the settle without the version check.
func (u UnversionedRefunds) QueueSettle(b *pgx.Batch, settled refunds.Refund, version int64) {
	from := len(b.QueuedQueries)
	u.RefundRows.QueueSettle(b, settled, version)
	Edited(b, from, layers.Version, u.Probe, refundVersion)
}
