-- Posts, their likes, and the count of those likes.
--
-- like_shards is how many counter rows the post's count is spread over
-- (post_like_shards): chosen when the post is created, never changed, so
-- a like counted in shard 5 can always be taken back from shard 5.
CREATE TABLE posts (
    id          uuid        PRIMARY KEY,
    author_id   uuid        NOT NULL REFERENCES users (id),
    title       text        NOT NULL CONSTRAINT posts_title_length CHECK (char_length(title) BETWEEN 1 AND 200),
    like_shards smallint    NOT NULL CONSTRAINT posts_like_shards_range CHECK (like_shards BETWEEN 1 AND 256),
    created_at  timestamptz NOT NULL
);

CREATE INDEX posts_created_idx ON posts (created_at DESC, id DESC);

-- One row per user and post that was ever liked: liked ⇄ unliked. An
-- unlike keeps the row (liked = false), so the version keeps counting and
-- a stale writer stays stale. shard is the counter row that counts this
-- like while it is liked (and counted it last, once unliked): an unlike
-- takes it back from the very row the like added it to, so every counter
-- row equals the liked rows that name it, and never goes below zero.
--
-- Layer 4: the primary key admits one like row per user and post, ever:
-- two first likes racing each other cannot both insert one.
CREATE TABLE likes (
    post_id    uuid        NOT NULL REFERENCES posts (id),
    user_id    uuid        NOT NULL REFERENCES users (id),
    liked      boolean     NOT NULL,
    shard      smallint    NOT NULL CONSTRAINT likes_shard_nonnegative CHECK (shard >= 0),
    version    bigint      NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    CONSTRAINT likes_pkey PRIMARY KEY (post_id, user_id)
);

-- A post's like count, spread over like_shards rows so that concurrent
-- likes of one hot post update different rows instead of queueing on
-- one. The count is sum(n). Each row moves only in the statement that
-- flips a like row naming it, so sum(n) is always the number of liked
-- rows; the reconciler checks it.
CREATE TABLE post_like_shards (
    post_id uuid     NOT NULL REFERENCES posts (id),
    shard   smallint NOT NULL,
    n       bigint   NOT NULL CONSTRAINT post_like_shards_n_nonnegative CHECK (n >= 0),
    CONSTRAINT post_like_shards_pkey PRIMARY KEY (post_id, shard)
);
