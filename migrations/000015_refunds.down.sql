DROP TABLE refund_items;
DROP TABLE refunds;
ALTER TABLE order_items DROP COLUMN returned;
UPDATE orders SET status = 'paid', version = version + 1 WHERE status = 'refunded';
ALTER TABLE orders DROP CONSTRAINT orders_status_valid;
ALTER TABLE orders ADD CONSTRAINT orders_status_valid
    CHECK (status IN ('pending_payment', 'paying', 'paid', 'fulfilled', 'cancelled', 'expired'));
ALTER TABLE orders DROP COLUMN refunded_cents;
