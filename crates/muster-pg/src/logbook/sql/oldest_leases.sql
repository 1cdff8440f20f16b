-- When the oldest lease still out of each kind was granted (a lease's run time counts from
-- its grant): leased items only, one row per kind that has any.
SELECT i.kind, min(l.leased_at)
FROM core.items i JOIN core.leases l ON l.id = i.lease_id
WHERE i.state = 'leased'
GROUP BY i.kind
