-- Items per kind, priority and state, with those retention removed (core.retention_removed,
-- counted in the removing transaction): in one snapshot, so that the feed's depths are these
-- minus the removed counts it reads later. Counted in two parts, each answered by a partial
-- index (items_listing_unleased, items_lease_expiry) rather than by reading the whole table.
SELECT kind, priority, state, sum(n)::bigint FROM (
    SELECT kind, priority, state, count(*) AS n FROM core.items WHERE state <> 'leased'
    GROUP BY 1, 2, 3
    UNION ALL
    SELECT kind, priority, state, count(*) FROM core.items WHERE state = 'leased' GROUP BY 1, 2, 3
    UNION ALL
    SELECT kind, priority, state, removed FROM core.retention_removed
) AS c GROUP BY 1, 2, 3
