package books

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier is what FromDB reads with: a pool, a connection or a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

const (
	sqlOrders   = `SELECT id::text, status, total_cents, refunded_cents FROM orders ORDER BY id`
	sqlPayments = `SELECT id::text, order_id::text, status, amount_cents,
		coalesce(charge_id, ''), coalesce(refund_id, '') FROM payments ORDER BY id`
	sqlRefunds = `SELECT id::text, order_id::text, status, amount_cents, coalesce(processor_refund_id, '')
		FROM refunds ORDER BY id`
	sqlRefundsOf = `SELECT id::text, order_id::text, status, amount_cents, coalesce(processor_refund_id, '')
		FROM refunds WHERE order_id = ANY($1::uuid[]) ORDER BY id`
	sqlOrdersOf   = `SELECT id::text, status, total_cents, refunded_cents FROM orders WHERE id = ANY($1::uuid[]) ORDER BY id`
	sqlPaymentsOf = `SELECT id::text, order_id::text, status, amount_cents,
		coalesce(charge_id, ''), coalesce(refund_id, '') FROM payments WHERE order_id = ANY($1::uuid[]) ORDER BY id`
)

// FromDB reads every order and every payment of the shop's database.
func FromDB(ctx context.Context, db Querier) ([]Order, []Payment, error) {
	return fromDB(ctx, db, sqlOrders, sqlPayments)
}

// FromDBFor reads the orders whose ids are ids, and their payments: what
// FromDB reads of them, without reading a whole large database (a bench
// that audits its cells one by one).
func FromDBFor(ctx context.Context, db Querier, ids []string) ([]Order, []Payment, error) {
	return fromDB(ctx, db, sqlOrdersOf, sqlPaymentsOf, ids)
}

func fromDB(ctx context.Context, db Querier, ordersSQL, paymentsSQL string, args ...any) ([]Order, []Payment, error) {
	rows, err := db.Query(ctx, ordersSQL, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("read orders: %w", err)
	}
	orders, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Order])
	if err != nil {
		return nil, nil, fmt.Errorf("read orders: %w", err)
	}
	rows, err = db.Query(ctx, paymentsSQL, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("read payments: %w", err)
	}
	payments, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Payment])
	if err != nil {
		return nil, nil, fmt.Errorf("read payments: %w", err)
	}
	return orders, payments, nil
}

// RefundsFromDB reads every refund of the shop's database.
func RefundsFromDB(ctx context.Context, db Querier) ([]Refund, error) {
	return refundsFromDB(ctx, db, sqlRefunds)
}

// RefundsFromDBFor reads the refunds of the orders whose ids are ids: what
// RefundsFromDB reads of them (FromDBFor's companion).
func RefundsFromDBFor(ctx context.Context, db Querier, ids []string) ([]Refund, error) {
	return refundsFromDB(ctx, db, sqlRefundsOf, ids)
}

func refundsFromDB(ctx context.Context, db Querier, sql string, args ...any) ([]Refund, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read refunds: %w", err)
	}
	refunds, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Refund])
	if err != nil {
		return nil, fmt.Errorf("read refunds: %w", err)
	}
	return refunds, nil
}

// FromGateway reads every charge from the audit of the gateway at baseURL
// (GET /v1/charges).
func FromGateway(ctx context.Context, client *http.Client, baseURL string) ([]Charge, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/v1/charges", nil)
	if err != nil {
		return nil, fmt.Errorf("read the gateway's charges: %w", err)
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the gateway's charges: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the gateway's charges: %s", res.Status)
	}
	var body struct {
		Items []Charge `json:"items"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("read the gateway's charges: %w", err)
	}
	return body.Items, nil
}

// Check gathers the books from the database and the gateway and audits
// them.
func Check(ctx context.Context, db Querier, client *http.Client, gatewayURL string) (Report, error) {
	b, err := Gather(ctx, db, client, gatewayURL)
	if err != nil {
		return Report{}, err
	}
	return b.Audit(), nil
}

// Gather reads the books from the database (orders, payments, refunds)
// and the gateway (charges, with their refunds).
func Gather(ctx context.Context, db Querier, client *http.Client, gatewayURL string) (Books, error) {
	orders, payments, err := FromDB(ctx, db)
	if err != nil {
		return Books{}, err
	}
	refunds, err := RefundsFromDB(ctx, db)
	if err != nil {
		return Books{}, err
	}
	charges, err := FromGateway(ctx, client, gatewayURL)
	if err != nil {
		return Books{}, err
	}
	return Books{Orders: orders, Payments: payments, Refunds: refunds, Charges: charges}, nil
}
