-- Validates migration 10's constraints: a scan of idempotency_keys under
-- SHARE UPDATE EXCLUSIVE, which lets the replicas' writes go on.
ALTER TABLE idempotency_keys VALIDATE CONSTRAINT idempotency_keys_scheme;
ALTER TABLE idempotency_keys VALIDATE CONSTRAINT idempotency_keys_key_format;
