DROP INDEX IF EXISTS holds_active_of_user_event_idx;
