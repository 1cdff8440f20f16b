-- One kind's health: $1 kind, $2 pods, $3 ready, $4 restarts, $5 phase, $6 events (a JSON
-- array), $7 when; only the newest $8 events are kept.
INSERT INTO core.worker_health AS h (kind, pods, ready, restarts, phase, events, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (kind) DO UPDATE SET
    pods = CASE WHEN EXCLUDED.pods > 0 THEN EXCLUDED.pods ELSE h.pods END,
    ready = coalesce(EXCLUDED.ready, h.ready),
    restarts = CASE WHEN EXCLUDED.pods > 0 THEN EXCLUDED.restarts ELSE h.restarts END,
    phase = coalesce(EXCLUDED.phase, h.phase),
    events = (SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb) FROM (
                  SELECT e, n FROM jsonb_array_elements(EXCLUDED.events)
                      WITH ORDINALITY AS t(e, n)
                  ORDER BY n DESC LIMIT $8) newest),
    updated_at = EXCLUDED.updated_at
