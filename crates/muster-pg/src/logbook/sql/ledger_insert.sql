-- The entries of `ledger_params`, in their order ($13: each one's place), with each item's
-- kind and priority for the live feed. The transaction takes its id (x) before any row draws
-- its sequence: every row is built from a join with x, so x is read first. A checkpoint relies
-- on it: a transaction that drew a sequence and has not committed already holds an id
-- (checkpoint.rs).
WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS tx)
INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event,
    from_state, to_state, actor, fence, at, data, prev_hash, hash, kind, priority)
SELECT e.t, e.id, e.sq, e.ev, e.fr, e.tt, e.ac, e.fe, e.at, e.da, e.pr, e.ha,
       i.kind, i.priority
FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[], $6::text[],
            $7::text[], $8::int8[], $9::timestamptz[], $10::text[], $11::bytea[],
            $12::bytea[], $13::int4[])
     AS e(t, id, sq, ev, fr, tt, ac, fe, at, da, pr, ha, ord)
CROSS JOIN x
LEFT JOIN core.items i ON i.id = CASE WHEN e.t = 'item' THEN e.id::uuid END
ORDER BY e.ord
