SELECT id, kind, priority, state, attempt, payload, result, not_before, created_at
FROM core.items WHERE id = $1
