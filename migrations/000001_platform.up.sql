-- Users and their bearer tokens. Only a SHA-256 hash of each token is kept:
-- tokens are 256-bit random values, so a fast hash is enough and a lookup by
-- hash stays a single index probe.
CREATE TABLE users (
    id          uuid        PRIMARY KEY,
    name        text        NOT NULL CONSTRAINT users_name_length CHECK (char_length(name) BETWEEN 1 AND 100),
    token_hash  bytea       NOT NULL CONSTRAINT users_token_hash_key UNIQUE,
    created_at  timestamptz NOT NULL
);

-- Layer 0: idempotency keys, scoped per principal (a user id, or "admin").
-- A row with no status_code is claimed by the request whose owner token it
-- holds until locked_until; after that it may be taken over. A row with a
-- status_code holds the stored response, replayed byte for byte.
CREATE TABLE idempotency_keys (
    principal    text        NOT NULL,
    key          text        NOT NULL CONSTRAINT idempotency_keys_key_format CHECK (key ~ '^[ -~]{1,255}$'),
    fingerprint  bytea       NOT NULL,
    owner        uuid        NOT NULL,
    locked_until timestamptz NOT NULL,
    status_code  integer,
    headers      jsonb,
    body         bytea,
    created_at   timestamptz NOT NULL,
    completed_at timestamptz,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (principal, key)
);

CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);
