CREATE TABLE orders (
    id          uuid        PRIMARY KEY,
    user_id     uuid        NOT NULL REFERENCES users (id),
    -- The Idempotency-Key the order was created with. The unique constraint
    -- is the last line behind the idempotency middleware and the lock: the
    -- same business request can never create two orders.
    request_key text        NOT NULL,
    status      text        NOT NULL CONSTRAINT orders_status_valid
                            CHECK (status IN ('pending_payment', 'paid', 'cancelled', 'expired')),
    total_cents bigint      NOT NULL CONSTRAINT orders_total_nonnegative CHECK (total_cents >= 0),
    version     bigint      NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    CONSTRAINT orders_user_request_key UNIQUE (user_id, request_key)
);

CREATE INDEX orders_user_created_idx ON orders (user_id, created_at DESC, id DESC);
CREATE INDEX orders_pending_expiry_idx ON orders (expires_at) WHERE status = 'pending_payment';

CREATE TABLE order_items (
    order_id         uuid    NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    sku              text    NOT NULL REFERENCES products (sku),
    quantity         integer NOT NULL CONSTRAINT order_items_quantity_range CHECK (quantity BETWEEN 1 AND 100),
    unit_price_cents bigint  NOT NULL CONSTRAINT order_items_price_nonnegative CHECK (unit_price_cents >= 0),
    PRIMARY KEY (order_id, sku)
);

-- One row per order whose reserved stock went back to the shelf. The primary
-- key is the backstop for "stock comes back exactly once": a second release
-- of the same order, by a racing cancel or expiry job, violates it and rolls
-- back with everything else in its transaction.
CREATE TABLE stock_releases (
    order_id    uuid        NOT NULL REFERENCES orders (id),
    reason      text        NOT NULL CONSTRAINT stock_releases_reason_valid CHECK (reason IN ('cancelled', 'expired')),
    released_at timestamptz NOT NULL,
    CONSTRAINT stock_releases_pkey PRIMARY KEY (order_id)
);
