package variants

import (
	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/layers"
)

// Payments returns the payments' writes with the version layer off when
// off takes it off (UnversionedPayments).
func Payments(rows payments.PaymentRows, off layers.Set, probe *layers.Probe) payments.PaymentRows {
	if isOff(off, layers.Version) {
		return UnversionedPayments{PaymentRows: rows, Probe: probe}
	}
	return rows
}

// UnversionedPayments settle and discard a payment whatever settled it
// since it was read: two settlers of one payment both write.
type UnversionedPayments struct {
	payments.PaymentRows
	Probe *layers.Probe
}

var paymentVersion = []Edit{
	{Prefix: "UPDATE payments", Old: "WHERE id = $1 AND version = $2", New: "WHERE id = $1 AND $2::bigint IS NOT NULL"},
	{Prefix: "DELETE FROM payments", Old: "AND version = $2", New: "AND $2::bigint IS NOT NULL"},
}

// QueueSettle queues the settlement without the version check.
func (u UnversionedPayments) QueueSettle(b *pgx.Batch, settled payments.Payment, version int64) {
	from := len(b.QueuedQueries)
	u.PaymentRows.QueueSettle(b, settled, version)
	Edited(b, from, layers.Version, u.Probe, paymentVersion...)
}

// QueueDiscard queues the discard without the version check.
func (u UnversionedPayments) QueueDiscard(b *pgx.Batch, p payments.Payment) {
	from := len(b.QueuedQueries)
	u.PaymentRows.QueueDiscard(b, p)
	Edited(b, from, layers.Version, u.Probe, paymentVersion...)
}
