-- Key schemes (internal/platform/keyscheme, DESIGN.md §8). Each idempotency
-- record carries the scheme it was written under; replicas of the release
-- before schemes leave the default, 1.
--
-- A scheme-1 record is named by the client's key, printable ASCII; a
-- scheme-2 record by "v2·<operation>·<key>", whose separator is not ASCII,
-- so the two forms never meet.
--
-- Every step here is quick under the table's lock: the column has a
-- constant default (no rewrite), and both CHECKs are added NOT VALID (no
-- scan). Migration 11 validates them in a transaction of its own, under a
-- lock that lets writes go on: the migrator runs each file as one
-- transaction, so a validation here would hold this one's lock for the
-- scan and stop the running release's writes.
ALTER TABLE idempotency_keys
    ADD COLUMN scheme smallint NOT NULL DEFAULT 1,
    ADD CONSTRAINT idempotency_keys_scheme CHECK (scheme IN (1, 2)) NOT VALID,
    DROP CONSTRAINT idempotency_keys_key_format,
    ADD CONSTRAINT idempotency_keys_key_format
        CHECK (key ~ '^[ -~]{1,255}$' OR key ~ '^v2·[a-z_]{1,40}·[ -~]{1,255}$') NOT VALID;
