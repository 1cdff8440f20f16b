SELECT to_regprocedure($1) IS NOT NULL
