-- Locks kind $1's pause row, creating it (never paused, the empty chain) when the kind has
-- none yet, so that the lock holds before a kind's first pause too; answers the row as it is.
INSERT INTO core.kind_pauses AS p (kind, paused, chain_len, chain_head)
VALUES ($1, false, 0, decode(repeat('00', 32), 'hex'))
ON CONFLICT (kind) DO UPDATE SET kind = p.kind
RETURNING p.paused, p.since, p.reason, p.actor, p.chain_len, p.chain_head
