WITH w AS (
    UPDATE core.leases l
    SET outcome = u.outcome, outcome_digest = u.digest, response = u.response,
        finished_at = $5
    FROM unnest($1::uuid[], $2::text[], $3::bytea[], $4::jsonb[])
         AS u(id, outcome, digest, response)
    WHERE l.id = u.id AND l.outcome IS NULL
    RETURNING 1)
SELECT core.expect_rows('finishing leases', count(*), $6) FROM w
