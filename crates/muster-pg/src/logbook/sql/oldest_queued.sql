SELECT k, p, (SELECT i.enqueued_at FROM core.items i
              WHERE i.kind = k AND i.priority = p AND i.state = 'queued'
              ORDER BY i.enqueued_at LIMIT 1)
FROM unnest($1::text[]) AS k CROSS JOIN unnest('{0,1,2}'::int2[]) AS p
