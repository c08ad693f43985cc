package variants

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// Orders returns rows with the database layers that off takes off,
// telling probe each time one was: the state rule applied blind
// (BlindOrders), the writes without their version (UnversionedOrders).
func Orders(rows orders.OrderRows, off layers.Set, probe *layers.Probe) orders.OrderRows {
	if isOff(off, layers.Lock) {
		rows = UnlockedOrders{OrderRows: rows, Probe: probe}
	}
	if isOff(off, layers.Version) {
		rows = UnversionedOrders{OrderRows: rows, Probe: probe}
	}
	if isOff(off, layers.State) {
		rows = BlindOrders{OrderRows: rows, Probe: probe}
	}
	return rows
}

// BlindOrders are the order rows as a flow without the state rule moves
// them: when the flow's rule refuses a move, or finds nothing to do, the
// order is moved all the same, as the rule would move an order in a state
// that allows it, and the move brings what it brings from that state (a
// cancel of a cancelled order returns its stock again). The rule is asked
// of the order in its own state and then in each state in turn, as read
// and then as if nothing of it were refunded or returned, and the first
// move it makes is the one written, at the version read: its status, and
// what its refunds hold and its lines returned moved by what the move
// changed (so a refund beyond what is left holds its amount on top). The
// expiry job's claim of the due orders takes every unpaid one, the one
// being paid too.
type BlindOrders struct {
	orders.OrderRows
	Probe *layers.Probe
}

// Update reads the order in tx and applies change blind, as QueueMove.
func (b BlindOrders) Update(ctx context.Context, tx pgx.Tx, id string, change orders.Change) (orders.Order, bool, error) {
	read := &pgx.Batch{}
	var o orders.Order
	b.QueueGet(read, id, &o)
	if err := tx.SendBatch(ctx, read).Close(); err != nil {
		return orders.Order{}, false, err
	}
	write := &pgx.Batch{}
	moved, ok, err := b.QueueMove(ctx, write, o, change)
	if err != nil || !ok {
		return moved, false, err
	}
	if err := orders.WriteError(tx.SendBatch(ctx, write).Close()); err != nil {
		return orders.Order{}, false, err
	}
	return moved, true, nil
}

// Look reads the order and answers as the rule applied blind would: it
// never refuses.
func (b BlindOrders) Look(ctx context.Context, id string, change orders.Change) (orders.Order, error) {
	o, err := b.Get(ctx, id)
	if err != nil {
		return orders.Order{}, err
	}
	_, err = b.OrderRows.Look(ctx, id, func(try *orders.Order) (bool, error) {
		*try = b.pretend(*try, change)
		return change(try)
	})
	return o, err
}

// QueueMove applies change blind: to the order as the state the rule
// moves it from, written at the version read.
func (b BlindOrders) QueueMove(ctx context.Context, batch *pgx.Batch, known orders.Order, change orders.Change) (orders.Order, bool, error) {
	from := b.pretend(known, change)
	moved, ok, err := b.OrderRows.QueueMove(ctx, batch, from, change)
	if err != nil || !ok {
		return known, ok, err
	}
	// The order as it is once written: known, moved by what the move
	// changed.
	out := moved
	out.ExpiresAt, out.Items = known.ExpiresAt, slices.Clone(known.Items)
	out.RefundedCents = known.RefundedCents + moved.RefundedCents - from.RefundedCents
	for i := range out.Items {
		out.Items[i].Returned += moved.Items[i].Returned - from.Items[i].Returned
	}
	return out, true, nil
}

// ExpireDue applies change blind to every unpaid order past its time.
func (b BlindOrders) ExpireDue(ctx context.Context, tx pgx.Tx, now time.Time, limit int, change orders.Change) (int, error) {
	due := Rewrite(tx, layers.State, b.Probe, Edit{Prefix: "WITH due AS",
		Old: "WHERE status = 'pending_payment' AND", New: "WHERE status IN ('pending_payment', 'paying') AND"})
	return b.OrderRows.ExpireDue(ctx, due, now, limit, func(o *orders.Order) (bool, error) {
		from := b.pretend(*o, change)
		moved, err := change(&from)
		if err == nil && moved {
			o.Status, o.UpdatedAt = from.Status, from.UpdatedAt
		}
		return moved, err
	})
}

// pretend is known as the rule would have to read it to move it: known
// itself when the rule moves it; otherwise the first state, expiry time
// and refunds the rule moves it from, or known again when there is none.
// The probe is told either way: the flow ran without its rule's say,
// whatever the rule would have said.
func (b BlindOrders) pretend(known orders.Order, change orders.Change) orders.Order {
	b.Probe.Took(layers.State)
	if moved, err := change(copyOf(known)); err == nil && moved {
		return known
	}
	for _, status := range append([]orders.Status{known.Status}, orders.Statuses...) {
		// The expiry time is part of the rule too (a payment begins
		// before it, an order expires after it), and so is what is left
		// to refund.
		for _, expires := range []time.Time{known.ExpiresAt, farFuture, farPast} {
			for _, untouched := range []bool{false, true} {
				from := *copyOf(known)
				from.Status, from.ExpiresAt = status, expires
				if untouched {
					from.RefundedCents = 0
					for i := range from.Items {
						from.Items[i].Returned = 0
					}
				}
				if m, e := change(copyOf(from)); e == nil && m {
					return from
				}
			}
		}
	}
	return known
}

// copyOf is a copy of o with items of its own, for a change to move.
func copyOf(o orders.Order) *orders.Order {
	o.Items = slices.Clone(o.Items)
	return &o
}

var (
	farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	farPast   = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
)

// UnlockedOrders are the order rows without the order's advisory lock,
// which the fulfilment takes in its transaction.
type UnlockedOrders struct {
	orders.OrderRows
	Probe *layers.Probe
}

// QueueLock queues no lock.
func (u UnlockedOrders) QueueLock(*pgx.Batch, string) { u.Probe.Took(layers.Lock) }

// UnversionedOrders are the order rows written without the version
// check: an order is written whatever moved it since it was read.
type UnversionedOrders struct {
	orders.OrderRows
	Probe *layers.Probe
}

// orderVersion cuts the version condition out of an order's write.
var orderVersion = Edit{Prefix: "UPDATE orders", Old: "WHERE id = $1 AND version = $2", New: "WHERE id = $1 AND $2::bigint IS NOT NULL"}

// Update writes without the version check.
func (u UnversionedOrders) Update(ctx context.Context, tx pgx.Tx, id string, change orders.Change) (orders.Order, bool, error) {
	return u.OrderRows.Update(ctx, Rewrite(tx, layers.Version, u.Probe, orderVersion), id, change)
}

// QueueMove queues the write without the version check.
func (u UnversionedOrders) QueueMove(ctx context.Context, b *pgx.Batch, known orders.Order, change orders.Change) (orders.Order, bool, error) {
	from := len(b.QueuedQueries)
	o, moved, err := u.OrderRows.QueueMove(ctx, b, known, change)
	Edited(b, from, layers.Version, u.Probe, orderVersion)
	return o, moved, err
}

// ExpireDue writes without the version check.
func (u UnversionedOrders) ExpireDue(ctx context.Context, tx pgx.Tx, now time.Time, limit int, change orders.Change) (int, error) {
	return u.OrderRows.ExpireDue(ctx, Rewrite(tx, layers.Version, u.Probe, orderVersion), now, limit, change)
}

// StaleLook names the pay flow's scenario in which every look at an
// order returns what the first look read (StaleLookOrders).
const StaleLook = "stale-look"

// StaleLookOrders answers every Look at an order with the order as the
// first Look of it read it: a click that read the order pending before
// the first payment began, and comes to the lock only after that payment
// settled, made certain instead of left to the scheduler. The pay flow
// asks its state rule of that read again in its begin, under the lock;
// only the version check sees that the read is stale.
type StaleLookOrders struct {
	orders.OrderRows
	// First is every replica's: order id → the order as first read. Any
	// begin comes after its own look, so the first look of an order is
	// before its first payment began.
	First *sync.Map
}

// Look returns the first read of the order, and the rule's answer to it.
func (s *StaleLookOrders) Look(ctx context.Context, id string, change orders.Change) (orders.Order, error) {
	if o, ok := s.First.Load(id); ok {
		read := o.(orders.Order)
		try := read
		try.Items = slices.Clone(read.Items)
		_, err := change(&try)
		return read, err
	}
	o, err := s.OrderRows.Look(ctx, id, change)
	if o.ID != "" {
		s.First.LoadOrStore(id, o)
	}
	return o, err
}

// The ways an order takes stock without the version layer (Stock).
const (
	// Unconditional decrements without the condition: only the CHECK
	// constraint refuses an oversell.
	Unconditional = "unconditional"
	// ReadCheckWrite reads the stock, checks it in Go and writes the
	// difference back: the lost update the conditional decrement
	// exists to prevent, which the CHECK cannot see.
	ReadCheckWrite = "read-check-write"
)

// Stock returns how an order takes stock with off's layers: the
// production step, or with the version layer off the way naive names
// (Unconditional when "").
func Stock(stock orders.Stock, off layers.Set, naive string, probe *layers.Probe) orders.Stock {
	if !isOff(off, layers.Version) {
		return stock
	}
	if naive == ReadCheckWrite {
		return ReadCheckWriteStock{Probe: probe}
	}
	return UnconditionalStock{Stock: stock, Probe: probe}
}

// UnconditionalStock is the production decrement without its condition.
type UnconditionalStock struct {
	orders.Stock
	Probe *layers.Probe
}

// Take decrements whatever the stock.
func (u UnconditionalStock) Take(ctx context.Context, tx pgx.Tx, lines []inventory.Line) (map[string]int64, error) {
	return u.Stock.Take(ctx, Rewrite(tx, layers.Version, u.Probe, Edit{Prefix: "UPDATE products",
		Old: "WHERE sku = $1 AND stock_available >= $2", New: "WHERE sku = $1 AND $2::integer IS NOT NULL"}), lines)
}

// The read-check-write, as naive code writes it.
const (
	sqlReadStock  = `SELECT stock_available, price_cents FROM products WHERE sku = $1`
	sqlWriteStock = `UPDATE products SET stock_available = $2 WHERE sku = $1`
)

// ReadCheckWriteStock takes stock by reading it, checking it in Go and
// writing the difference back.
type ReadCheckWriteStock struct{ Probe *layers.Probe }

// Take reads, checks and writes each line, in SKU order.
func (r ReadCheckWriteStock) Take(ctx context.Context, tx pgx.Tx, lines []inventory.Line) (map[string]int64, error) {
	r.Probe.Took(layers.Version)
	prices := make(map[string]int64, len(lines))
	var short []inventory.Line
	for _, l := range inventory.BySKU(lines) {
		var stock int
		var price int64
		if err := tx.QueryRow(ctx, sqlReadStock, l.SKU).Scan(&stock, &price); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("read stock of %s: %w", l.SKU, err)
		}
		if stock < l.Quantity {
			short = append(short, l)
			continue
		}
		_, err := tx.Exec(ctx, sqlWriteStock, l.SKU, stock-l.Quantity)
		if postgres.ConstraintViolated(err) == inventory.ConstraintStockNonNegative {
			return nil, inventory.StockConstraint(l)
		}
		if err != nil {
			return nil, fmt.Errorf("write stock of %s: %w", l.SKU, err)
		}
		prices[l.SKU] = price
	}
	if len(short) > 0 {
		return nil, inventory.Shortfall(ctx, tx, short)
	}
	return prices, nil
}

// isOff reports whether off takes l off, without asking its probe.
func isOff(off layers.Set, l layers.Layer) bool { return off.Takes(l) }
