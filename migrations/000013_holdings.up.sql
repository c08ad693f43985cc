-- What one user holds of one event, counted in a row: the caps on it
-- (SHOP_SEAT_CAP_HOLDS, SHOP_SEAT_CAP_SEATS) hold without any lock.
--
-- Every hold counts itself up in its transaction, and every confirm,
-- release and expiry counts its hold down in the statement that moves it
-- (package seats). The caps are the service's settings, so each hold
-- writes them into the row as its replica has them, and
-- holdings_within_caps (layer 4) refuses a count past them, whatever the
-- code in front of it did: of two holds by one user that both read a
-- count under a cap, the second waits for the first's row, then counts
-- past the cap and rolls back. The count of rows that 000009 indexes is
-- no such guard: no constraint counts rows, and a lock on the rows
-- counted does not stop a new one from joining them.
CREATE TABLE holdings (
    user_id   uuid    NOT NULL REFERENCES users (id),
    event_id  uuid    NOT NULL REFERENCES events (id),
    holds     integer NOT NULL, -- the user's active holds on the event
    seats     integer NOT NULL, -- their seats
    max_holds integer NOT NULL, -- the caps, as the last hold counted had them
    max_seats integer NOT NULL,
    CONSTRAINT holdings_pkey PRIMARY KEY (user_id, event_id),
    CONSTRAINT holdings_within_caps CHECK (holds BETWEEN 0 AND max_holds AND seats BETWEEN 0 AND max_seats)
);

-- The holds active now, counted; under the default caps (4 holds, 10
-- seats), or what the user holds already if that is more.
INSERT INTO holdings (user_id, event_id, holds, seats, max_holds, max_seats)
SELECT user_id, event_id, count(*), sum(cardinality(seats)),
    greatest(count(*), 4), greatest(sum(cardinality(seats)), 10)
FROM holds WHERE status = 'active'
GROUP BY user_id, event_id;
