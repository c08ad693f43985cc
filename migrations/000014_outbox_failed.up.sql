-- Events a consumer gave up on for good (package outbox, failed.go;
-- DESIGN.md §9): a provider refused the effect, and no redelivery of the
-- same event can change its answer. One row per consumer and event,
-- written before the delivery is acknowledged, so that the failure is
-- never only a log line. A row is resolved once the consumer records the
-- event in its inbox (after `shop events replay`, or a redelivery that
-- succeeded); the relay's retention deletes the resolved ones.
-- shop_events_failed counts the unresolved ones.
CREATE TABLE outbox_failed (
    consumer  text        NOT NULL,
    event_id  uuid        NOT NULL,
    event     text        NOT NULL,
    subject   text        NOT NULL,
    at        timestamptz NOT NULL,
    data      bytea       NOT NULL,
    error     text        NOT NULL,
    attempts  integer     NOT NULL,
    first_at  timestamptz NOT NULL,
    last_at   timestamptz NOT NULL,
    CONSTRAINT outbox_failed_pkey PRIMARY KEY (consumer, event_id)
);
