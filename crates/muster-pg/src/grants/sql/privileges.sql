-- For each privilege $4[n] on object $3[n] of kind $2[n] ('TABLE', 'SEQUENCE', 'FUNCTION', or
-- 'COLUMNS': the privilege on each column of the table), in that order: whether role $1 has
-- it, and whether $1 or a role $1 can SET ROLE to (a member, NOINHERIT or not) has it, on a
-- table's columns counted too (a column privilege on a table asked as a whole). An object that
-- does not exist counts as not granted. Objects are found in the catalog, not by name lookups
-- (which a role without USAGE on the schema may not make).
WITH objects AS (
    SELECT x.n, x.k, x.o, x.p,
           (SELECT c.oid FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
            WHERE x.k <> 'FUNCTION' AND s.nspname || '.' || c.relname = x.o) AS rel,
           (SELECT f.oid FROM pg_proc f JOIN pg_namespace s ON s.oid = f.pronamespace
            WHERE x.k = 'FUNCTION' AND s.nspname = split_part(x.o, '.', 1)
              AND f.oid::regprocedure::text = replace(x.o, ', ', ',')) AS fn
    FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS x(k, o, p, n)
), asked AS (
    SELECT objects.*, a.attname::text AS c, a.attnum
    FROM objects
    LEFT JOIN pg_attribute a
           ON objects.k = 'COLUMNS' AND a.attrelid = objects.rel
          AND a.attnum > 0 AND NOT a.attisdropped
), reach AS (
    SELECT r.oid, r.rolname = $1::name AS itself
    FROM pg_roles r
    WHERE pg_has_role($1::name, r.oid, 'MEMBER')
)
SELECT asked.o, asked.c, asked.p,
       coalesce(bool_or(g.whole) FILTER (WHERE reach.itself), false),
       coalesce(bool_or(g.whole OR g.some), false)
FROM asked
CROSS JOIN reach
CROSS JOIN LATERAL (SELECT
    CASE asked.k
        WHEN 'TABLE' THEN has_table_privilege(reach.oid, asked.rel, asked.p)
        WHEN 'COLUMNS' THEN has_column_privilege(reach.oid, asked.rel, asked.c, asked.p)
        WHEN 'SEQUENCE' THEN has_sequence_privilege(reach.oid, asked.rel, asked.p)
        ELSE has_function_privilege(reach.oid, asked.fn, asked.p)
    END AS whole,
    CASE WHEN asked.k = 'TABLE' AND asked.p IN ('SELECT', 'INSERT', 'UPDATE', 'REFERENCES')
        THEN has_any_column_privilege(reach.oid, asked.rel, asked.p)
    END AS some) g
GROUP BY asked.n, asked.attnum, asked.o, asked.c, asked.p
ORDER BY asked.n, asked.attnum
