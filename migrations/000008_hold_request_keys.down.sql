ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_order_request_key;
ALTER TABLE payments DROP COLUMN IF EXISTS request_key;
DROP INDEX IF EXISTS holds_user_active_idx;
ALTER TABLE holds DROP CONSTRAINT IF EXISTS holds_user_request_key;
ALTER TABLE holds DROP COLUMN IF EXISTS request_key;
