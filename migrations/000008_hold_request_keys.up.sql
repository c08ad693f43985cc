-- Every row a keyed request creates carries its Idempotency-Key under a
-- unique constraint, as orders do (orders_user_request_key). A request
-- whose commit reached the database but whose answer was lost answers
-- 5xx, which frees the key; its retry then finds the row the first try
-- committed and answers with it, instead of doing the work a second time
-- or being refused the first try's own seats.
--
-- The key is NULL on rows no keyed request made (those from before this
-- migration, and the benchmarks' raw baselines); a unique constraint
-- leaves NULLs alone.

-- One hold per (user, request key).
ALTER TABLE holds ADD COLUMN request_key text;
ALTER TABLE holds ADD CONSTRAINT holds_user_request_key UNIQUE (user_id, request_key);

-- GET /v1/holds: a user's active holds, newest first.
CREATE INDEX holds_user_active_idx ON holds (user_id, created_at DESC, id DESC) WHERE status = 'active';

-- One payment per (order, request key): an order is one user's, so this
-- is the user's key too, and the payment's package reads only its own
-- table to find it.
ALTER TABLE payments ADD COLUMN request_key text;
ALTER TABLE payments ADD CONSTRAINT payments_order_request_key UNIQUE (order_id, request_key);
