SELECT id, state, trace FROM core.items WHERE kind = $1 AND idempotency_key = $2
