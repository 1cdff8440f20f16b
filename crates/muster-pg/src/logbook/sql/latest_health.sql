SELECT h.kind, h.ready, h.restarts, h.phase, h.events, h.updated_at, d.digest
FROM core.worker_health h LEFT JOIN core.worker_digests d ON d.kind = h.kind
ORDER BY h.kind
