-- Events, their seats, holds on seats, and the bookings that sell them.
--
-- A seat is available, held (by one active hold) or booked (by one
-- booking, for ever). Its version is bumped by every write: a hold writes
-- a seat only at the version it read (layer 3), so of two holds that read
-- the same available seat, one writes and the other writes nothing.
CREATE TABLE events (
    id            uuid        PRIMARY KEY,
    name          text        NOT NULL CONSTRAINT events_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    rows          smallint    NOT NULL CONSTRAINT events_rows_range CHECK (rows BETWEEN 1 AND 26),
    seats_per_row smallint    NOT NULL CONSTRAINT events_seats_per_row_range CHECK (seats_per_row BETWEEN 1 AND 50),
    created_at    timestamptz NOT NULL
);

-- position orders the seat map: row × 50 + number (A1 = 1, B1 = 51).
CREATE TABLE seats (
    event_id uuid     NOT NULL REFERENCES events (id),
    seat     text     NOT NULL,
    position smallint NOT NULL,
    status   text     NOT NULL CONSTRAINT seats_status_known CHECK (status IN ('available', 'held', 'booked')),
    hold_id  uuid,
    version  bigint   NOT NULL,
    CONSTRAINT seats_pkey PRIMARY KEY (event_id, seat)
);

CREATE INDEX seats_hold_idx ON seats (hold_id) WHERE hold_id IS NOT NULL;

-- A hold of 1–10 seats: active → confirmed | released | expired.
CREATE TABLE holds (
    id         uuid        PRIMARY KEY,
    event_id   uuid        NOT NULL REFERENCES events (id),
    user_id    uuid        NOT NULL REFERENCES users (id),
    seats      text[]      NOT NULL CONSTRAINT holds_seats_count CHECK (cardinality(seats) BETWEEN 1 AND 10),
    status     text        NOT NULL CONSTRAINT holds_status_known CHECK (status IN ('active', 'confirmed', 'released', 'expired')),
    expires_at timestamptz NOT NULL,
    version    bigint      NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);

-- The expiry job's scan: active holds by when they end.
CREATE INDEX holds_due_idx ON holds (expires_at) WHERE status = 'active';

-- One row per seat of a hold; active while the hold is.
--
-- Layer 4: the partial unique index admits one active hold per seat,
-- whatever the code in front of it did.
CREATE TABLE hold_seats (
    hold_id  uuid    NOT NULL REFERENCES holds (id),
    event_id uuid    NOT NULL,
    seat     text    NOT NULL,
    active   boolean NOT NULL,
    CONSTRAINT hold_seats_pkey PRIMARY KEY (hold_id, seat)
);

CREATE UNIQUE INDEX hold_seats_one_active_per_seat ON hold_seats (event_id, seat) WHERE active;

-- A confirmed hold's booking: one per hold.
CREATE TABLE bookings (
    id         uuid        PRIMARY KEY,
    hold_id    uuid        NOT NULL REFERENCES holds (id),
    event_id   uuid        NOT NULL REFERENCES events (id),
    user_id    uuid        NOT NULL REFERENCES users (id),
    seats      text[]      NOT NULL,
    created_at timestamptz NOT NULL,
    CONSTRAINT bookings_one_per_hold UNIQUE (hold_id)
);

-- Layer 4: a seat is booked once, ever.
CREATE TABLE tickets (
    booking_id uuid NOT NULL REFERENCES bookings (id),
    event_id   uuid NOT NULL,
    seat       text NOT NULL,
    CONSTRAINT tickets_one_per_seat UNIQUE (event_id, seat)
);
