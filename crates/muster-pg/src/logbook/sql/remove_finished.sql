-- One batch of retention in one group of finished items (core.remove_finished, V18, V23).
SELECT n_scanned, last_id, n_removed, n_leases
FROM core.remove_finished($1, $2, $3, $4, $5, $6)
