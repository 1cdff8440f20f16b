-- The texts of up to $2 proposals rejected at least $1 seconds ago, oldest decision first;
-- rows another transaction holds are left to the next pass.
UPDATE core.edits SET body = NULL
WHERE id IN (
    SELECT id FROM core.edits
    WHERE state = 'rejected' AND body IS NOT NULL
      AND decided_at < now() - make_interval(secs => $1)
    ORDER BY decided_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED)
