-- Items gain the terminal state `cancelled` (an operator's cancel). The state's CHECK is
-- replaced NOT VALID: a brief exclusive lock and no scan (every existing row satisfies the wider
-- list); V13 validates it under a lock that lets reads and writes go on.
ALTER TABLE core.items DROP CONSTRAINT items_state_check,
    ADD CONSTRAINT items_state_check
        CHECK (state IN ('queued', 'leased', 'done', 'failed', 'needs_subtool', 'cancelled')) NOT VALID;
