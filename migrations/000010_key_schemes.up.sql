-- Key schemes (internal/platform/keyscheme, DESIGN.md §8). Each idempotency
-- record carries the scheme it was written under; replicas of the release
-- before schemes leave the default, 1.
--
-- A scheme-1 record is named by the client's key, printable ASCII; a
-- scheme-2 record by "v2·<operation>·<key>", whose separator is not ASCII,
-- so the two forms never meet. The new format is added NOT VALID and
-- validated apart: the validation reads the table under a lock that lets
-- writes go on, where a plain ADD CONSTRAINT would stop them for the scan.
ALTER TABLE idempotency_keys
    ADD COLUMN scheme smallint NOT NULL DEFAULT 1 CONSTRAINT idempotency_keys_scheme CHECK (scheme IN (1, 2));

ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_key_format,
    ADD CONSTRAINT idempotency_keys_key_format
        CHECK (key ~ '^[ -~]{1,255}$' OR key ~ '^v2·[a-z_]{1,40}·[ -~]{1,255}$') NOT VALID;

ALTER TABLE idempotency_keys VALIDATE CONSTRAINT idempotency_keys_key_format;
