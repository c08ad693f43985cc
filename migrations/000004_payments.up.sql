-- A payment is one attempt to charge an order through the gateway. Its id is
-- the Idempotency-Key the gateway sees, so however often the charge is sent
-- (client retries, the reconciler, a restart after a crash) it is one charge.
CREATE TABLE payments (
    id             uuid        PRIMARY KEY,
    order_id       uuid        NOT NULL REFERENCES orders (id),
    status         text        NOT NULL CONSTRAINT payments_status_valid
                               CHECK (status IN ('processing', 'succeeded', 'failed', 'refunded')),
    amount_cents   bigint      NOT NULL CONSTRAINT payments_amount_positive CHECK (amount_cents > 0),
    payment_method text        NOT NULL,
    -- The gateway's charge and refund, once known.
    charge_id      text,
    refund_id      text,
    failure_reason text,
    version        bigint      NOT NULL DEFAULT 1,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    -- A charge settles one payment, never two.
    CONSTRAINT payments_charge_id_key UNIQUE (charge_id),
    CONSTRAINT payments_settled_has_charge
        CHECK (status NOT IN ('succeeded', 'refunded') OR charge_id IS NOT NULL)
);

-- The backstop of "one charge per order": at most one payment per order is
-- processing or succeeded. A second attempt can only begin once the first
-- has failed (or been refunded), whatever got past the lock and the state
-- check.
CREATE UNIQUE INDEX payments_one_active_per_order ON payments (order_id)
    WHERE status IN ('processing', 'succeeded');

CREATE INDEX payments_order_idx ON payments (order_id, created_at);

-- The reconciler's work list: payments whose outcome is not yet known.
CREATE INDEX payments_processing_idx ON payments (updated_at) WHERE status = 'processing';
