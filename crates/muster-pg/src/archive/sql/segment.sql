-- A pruned segment by its end checkpoint: its digest (none: no such segment).
SELECT digest FROM core.ledger_archived WHERE through_seq = $1
