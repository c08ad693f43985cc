UPDATE orders SET status = 'pending_payment', version = version + 1 WHERE status = 'paying';
ALTER TABLE orders DROP CONSTRAINT orders_status_valid;
ALTER TABLE orders ADD CONSTRAINT orders_status_valid
    CHECK (status IN ('pending_payment', 'paid', 'cancelled', 'expired'));
