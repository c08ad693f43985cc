-- Refunds and returns (issue 40, internal/refunds): money back, exactly
-- once, never more than was captured.

-- What an order's refunds hold of its total: every refund not failed, the
-- ones in flight included, so that two refunds never both pass the check
-- of the remainder. A refund adds its amount in the transaction that
-- begins it, and a refund the processor refused takes it back. The CHECK
-- is layer 4 of the refund flow: whatever got past the rule and the
-- version check, an order's refunds never hold more than its total.
ALTER TABLE orders
    ADD COLUMN refunded_cents bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT orders_refunded_within_total CHECK (refunded_cents BETWEEN 0 AND total_cents);

-- An order whose refunds that succeeded cover its whole total is refunded,
-- once none is in flight: terminal, the fulfilment skips it. A partly
-- refunded order stays paid or fulfilled.
ALTER TABLE orders DROP CONSTRAINT orders_status_valid;
ALTER TABLE orders ADD CONSTRAINT orders_status_valid
    CHECK (status IN ('pending_payment', 'paying', 'paid', 'fulfilled', 'refunded', 'cancelled', 'expired'));

-- The units of each line sent back by a return, its refund in flight or
-- succeeded. Their stock comes back once, when the refund succeeds; the
-- CHECK admits no return of a unit that was never bought.
ALTER TABLE order_items
    ADD COLUMN returned integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT order_items_returned_within_quantity CHECK (returned BETWEEN 0 AND quantity);

-- A refund is one request to give money back. Its id is the
-- Idempotency-Key the processor sees, so however often the refund is sent
-- (the request, a retry of it, the reconciler) it is one refund there.
CREATE TABLE refunds (
    id                  uuid        PRIMARY KEY,
    order_id            uuid        NOT NULL REFERENCES orders (id),
    -- The Idempotency-Key of the request that asked for it: a copy of the
    -- request that got past the key's claim finds this refund, never makes
    -- a second.
    request_key         text        NOT NULL,
    -- The order's owner (a user id) or the admin.
    requested_by        text        NOT NULL,
    amount_cents        bigint      NOT NULL CONSTRAINT refunds_amount_positive CHECK (amount_cents > 0),
    status              text        NOT NULL CONSTRAINT refunds_status_valid
                                    CHECK (status IN ('processing', 'succeeded', 'failed')),
    reason              text        CONSTRAINT refunds_reason_length CHECK (char_length(reason) <= 200),
    -- The processor's refund, once known.
    processor_refund_id text,
    failure_reason      text,
    version             bigint      NOT NULL DEFAULT 1,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    CONSTRAINT refunds_order_request_key UNIQUE (order_id, request_key),
    -- One processor refund settles one refund, never two.
    CONSTRAINT refunds_processor_refund_id_key UNIQUE (processor_refund_id),
    CONSTRAINT refunds_succeeded_has_processor_id
        CHECK (status <> 'succeeded' OR processor_refund_id IS NOT NULL)
);

-- An order's refunds, oldest first (GET /v1/orders/{id}/refunds, and the
-- sum of those that succeeded).
CREATE INDEX refunds_order_idx ON refunds (order_id, created_at, id);

-- The reconciler's work list: refunds whose outcome is not yet known.
CREATE INDEX refunds_processing_idx ON refunds (updated_at) WHERE status = 'processing';

-- The units a refund returns.
CREATE TABLE refund_items (
    refund_id uuid    NOT NULL REFERENCES refunds (id) ON DELETE CASCADE,
    sku       text    NOT NULL,
    quantity  integer NOT NULL CONSTRAINT refund_items_quantity_positive CHECK (quantity > 0),
    PRIMARY KEY (refund_id, sku)
);
