SELECT digest FROM core.worker_digests WHERE kind = $1
