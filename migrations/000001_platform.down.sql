DROP TABLE idempotency_keys;
DROP TABLE users;
