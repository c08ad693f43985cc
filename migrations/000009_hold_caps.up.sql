-- The caps on what one user holds of one event (SHOP_SEAT_CAP_*): every
-- hold counts the user's active holds on its event, inside its
-- transaction. This index finds them without reading the event's other
-- holds or the user's past ones.
CREATE INDEX holds_active_of_user_event_idx ON holds (user_id, event_id) WHERE status = 'active';
