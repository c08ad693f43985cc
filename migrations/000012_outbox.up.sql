-- Events after the commit: the transactional outbox, the consumers' inbox,
-- and fulfilment (package outbox, DESIGN.md §9).

-- The outbox: the table of watermill-sql's PostgreSQL schema for the
-- forwarder's topic "outbox" (DefaultPostgreSQLSchema; the publisher never
-- creates it inside a flow's transaction). Each row is an envelope: the
-- event, its stream and its metadata, as JSON. transaction_id is the
-- writer's transaction: the relay reads only rows of transactions older
-- than every one in flight, so a row committed late is never skipped.
CREATE TABLE watermill_outbox (
    "offset"         bigserial,
    "uuid"           varchar(36) NOT NULL,
    "created_at"     timestamp   NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"        json        DEFAULT NULL,
    "metadata"       json        DEFAULT NULL,
    "transaction_id" xid8        NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);
-- One row per fact: an event's id is derived from its name and subject
-- (outbox.EventID), so a second order.paid of one order is refused here.
CREATE UNIQUE INDEX outbox_one_per_event ON watermill_outbox ((payload->>'uuid'));
-- The lag, the redelivery and the retention read by age.
CREATE INDEX outbox_created_at_idx ON watermill_outbox (created_at);

-- How far the relay has published: watermill-sql's offsets table.
CREATE TABLE watermill_offsets_outbox (
    consumer_group                varchar(255) NOT NULL,
    offset_acked                  bigint,
    last_processed_transaction_id xid8         NOT NULL,
    PRIMARY KEY (consumer_group)
);

-- The inbox: each consumer's processed events, one row per (consumer,
-- event), written in the consumer's transaction.
CREATE TABLE inbox (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    event        text        NOT NULL,
    processed_at timestamptz NOT NULL,
    CONSTRAINT inbox_pkey PRIMARY KEY (consumer, event_id)
);
CREATE INDEX inbox_processed_at_idx ON inbox (processed_at);

-- Events the relay published again from the outbox because a consumer had
-- not recorded them: one claim per event and pause, whichever replica
-- makes it.
CREATE TABLE outbox_redeliveries (
    event_id     uuid        PRIMARY KEY,
    attempts     integer     NOT NULL,
    last_at      timestamptz NOT NULL
);

-- Fulfilment: a paid order is shipped once.
ALTER TABLE orders DROP CONSTRAINT orders_status_valid;
ALTER TABLE orders ADD CONSTRAINT orders_status_valid
    CHECK (status IN ('pending_payment', 'paying', 'paid', 'fulfilled', 'cancelled', 'expired'));
CREATE TABLE fulfilments (
    order_id     uuid        NOT NULL REFERENCES orders (id),
    event_id     uuid        NOT NULL,
    fulfilled_at timestamptz NOT NULL,
    CONSTRAINT fulfilments_pkey PRIMARY KEY (order_id)
);
