DELETE FROM idempotency_keys WHERE key !~ '^[ -~]{1,255}$';

ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_key_format,
    ADD CONSTRAINT idempotency_keys_key_format CHECK (key ~ '^[ -~]{1,255}$');

ALTER TABLE idempotency_keys DROP COLUMN scheme;
