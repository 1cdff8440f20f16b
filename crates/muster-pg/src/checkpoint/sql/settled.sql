-- Whether no transaction with an id below the fence ($1, a transaction id) still runs.
SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::text::xid8
