-- Up to $3 ledger rows after $1, each marked whether snapshot $2 counted it, each with the
-- horizon of the reading snapshot (one row with only the horizon when there are none). One
-- statement, so the rows and the horizon come from the same snapshot.
WITH h AS (SELECT pg_snapshot_xmin(s)::text::int8 AS xmin, pg_snapshot_xmax(s)::text::int8 AS xmax
           FROM (SELECT pg_current_snapshot() AS s) cur)
SELECT h.xmin, h.xmax, r.* FROM h LEFT JOIN LATERAL (
    SELECT l.seq, l.subject_type, l.subject_id, l.kind, l.priority, l.from_state, l.to_state,
           l.actor, l.at, CASE WHEN l.subject_type IN ('edit', 'kind') THEN l.data END,
           pg_visible_in_snapshot(l.tx, $2::text::pg_snapshot) AS counted
    FROM core.ledger l WHERE l.seq > $1 ORDER BY l.seq LIMIT $3) r ON true
