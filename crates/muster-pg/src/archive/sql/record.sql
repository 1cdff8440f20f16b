-- Records a pruned segment: the entries after $1 up to $2 ($3 its digest, $4 how many), with the
-- newest `at` among them, read before any is deleted.
INSERT INTO core.ledger_archived (through_seq, from_seq, digest, entries, last_at)
SELECT $2, $1, $3, $4, max(l.at) FROM core.ledger AS l WHERE l.seq > $1 AND l.seq <= $2
