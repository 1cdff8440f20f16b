-- Records digest $2 as deployed for kind $1 at $3; answers the digest deployed before.
WITH previous AS (SELECT digest FROM core.worker_digests WHERE kind = $1),
     upsert AS (
         INSERT INTO core.worker_digests (kind, digest, reported_at) VALUES ($1, $2, $3)
         ON CONFLICT (kind) DO UPDATE SET digest = EXCLUDED.digest, reported_at = EXCLUDED.reported_at)
SELECT (SELECT digest FROM previous)
