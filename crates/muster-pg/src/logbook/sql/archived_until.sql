-- The newest `at` of the entries archived out of Logbook (NULL: none; V20).
SELECT max(last_at) FROM core.ledger_archived
