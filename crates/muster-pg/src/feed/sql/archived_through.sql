-- The sequence up to which the ledger was archived out of Logbook (0: none; V20).
SELECT coalesce(max(through_seq), 0) FROM core.ledger_archived
