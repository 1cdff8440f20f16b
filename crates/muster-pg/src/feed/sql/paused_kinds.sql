SELECT kind FROM core.kind_pauses WHERE paused ORDER BY kind
