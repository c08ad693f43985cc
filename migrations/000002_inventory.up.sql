-- Products and their stock. stock_available only moves through atomic
-- conditional updates (SET stock_available = stock_available - q WHERE
-- stock_available >= q); the CHECK is the backstop that makes an oversell
-- impossible even if a code path forgets the condition.
--
-- version covers the editable attributes (name, price) and backs ETag /
-- If-Match; stock movements do not bump it, so a flash sale never makes an
-- admin's price edit fail with 412.
CREATE TABLE products (
    sku             text        PRIMARY KEY CONSTRAINT products_sku_format CHECK (sku ~ '^[A-Za-z0-9_-]{1,64}$'),
    name            text        NOT NULL CONSTRAINT products_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    price_cents     bigint      NOT NULL CONSTRAINT products_price_nonnegative CHECK (price_cents >= 0),
    stock_available integer     NOT NULL CONSTRAINT products_stock_nonnegative CHECK (stock_available >= 0),
    version         bigint      NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
