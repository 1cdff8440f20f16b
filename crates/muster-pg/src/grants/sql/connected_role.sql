-- The connected role and what makes it more than the runtime role: whether it is a superuser,
-- has CREATEROLE or owns `core.ledger` (the schema owner), and the roles it is a member of
-- (NOINHERIT or not: it can SET ROLE to them) that are superusers, the schema owner, or have
-- CREATEROLE (their names, or NULL for none).
WITH me AS (
    SELECT oid, rolname, rolsuper, rolcreaterole FROM pg_roles WHERE rolname = current_user
), reach AS (
    SELECT r.oid, r.rolname, r.rolsuper, r.rolcreaterole
    FROM pg_roles r, me
    WHERE r.oid <> me.oid AND pg_has_role(me.oid, r.oid, 'MEMBER')
), owner AS (
    SELECT c.relowner FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
    WHERE s.nspname = 'core' AND c.relname = 'ledger'
)
SELECT me.rolname::text,
       me.rolsuper,
       me.rolcreaterole,
       (SELECT string_agg(rolname, ', ' ORDER BY rolname) FROM reach WHERE rolsuper),
       coalesce(me.oid = (SELECT relowner FROM owner), false),
       (SELECT rolname::text FROM reach WHERE oid = (SELECT relowner FROM owner)),
       (SELECT string_agg(rolname, ', ' ORDER BY rolname) FROM reach WHERE rolcreaterole)
FROM me
