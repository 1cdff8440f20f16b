-- Whether entries at or below $1 (the archived boundary) are still in Logbook: a prune of the
-- segment up to it stopped before its end.
SELECT EXISTS (SELECT 1 FROM core.ledger AS l WHERE l.seq <= $1)
