-- The connected role, whether it is a superuser, and whether it owns `core.ledger` (the
-- schema owner).
SELECT current_user::text,
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),
       coalesce(pg_has_role(current_user,
           (SELECT relowner FROM pg_class WHERE oid = to_regclass('core.ledger')), 'USAGE'), false)
