-- Writes back kind $1's pause state and chain head (the row `lock_kind.sql` locked).
UPDATE core.kind_pauses
SET paused = $2, since = $3, reason = $4, actor = $5, chain_len = $6, chain_head = $7
WHERE kind = $1
