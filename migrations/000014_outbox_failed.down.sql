DROP TABLE outbox_failed;
