-- Nothing to undo: a validated constraint is the NOT VALID one, checked.
SELECT 1;
