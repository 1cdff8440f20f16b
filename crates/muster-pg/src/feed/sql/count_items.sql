SELECT kind, priority, state, count(*) FROM core.items GROUP BY 1, 2, 3
