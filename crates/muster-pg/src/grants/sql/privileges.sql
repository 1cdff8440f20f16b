-- Whether role $1 has each privilege $4[n] on object $3[n] of kind $2[n] ('TABLE',
-- 'SEQUENCE' or 'FUNCTION'); an object that does not exist counts as not granted.
SELECT o, p, coalesce(CASE k
    WHEN 'TABLE' THEN has_table_privilege($1, to_regclass(o), p)
    WHEN 'SEQUENCE' THEN has_sequence_privilege($1, to_regclass(o), p)
    ELSE has_function_privilege($1, to_regprocedure(o), p) END, false)
FROM unnest($2::text[], $3::text[], $4::text[]) AS x(k, o, p)
