-- The entries of `ledger_params`, in their order ($13: each one's place), with each item's
-- kind and priority for the live feed.
INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event,
    from_state, to_state, actor, fence, at, data, prev_hash, hash, kind, priority)
SELECT e.t, e.id, e.sq, e.ev, e.fr, e.tt, e.ac, e.fe, e.at, e.da, e.pr, e.ha,
       i.kind, i.priority
FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[], $6::text[],
            $7::text[], $8::int8[], $9::timestamptz[], $10::text[], $11::bytea[],
            $12::bytea[], $13::int4[])
     AS e(t, id, sq, ev, fr, tt, ac, fe, at, da, pr, ha, ord)
LEFT JOIN core.items i ON i.id = CASE WHEN e.t = 'item' THEN e.id::uuid END
ORDER BY e.ord
