DROP TABLE fulfilments;
UPDATE orders SET status = 'paid', version = version + 1 WHERE status = 'fulfilled';
ALTER TABLE orders DROP CONSTRAINT orders_status_valid;
ALTER TABLE orders ADD CONSTRAINT orders_status_valid
    CHECK (status IN ('pending_payment', 'paying', 'paid', 'cancelled', 'expired'));
DROP TABLE outbox_redeliveries;
DROP TABLE inbox;
DROP TABLE watermill_offsets_outbox;
DROP TABLE watermill_outbox;
