-- Whether role $1 may use schema `core`, and whether it or a role it can SET ROLE to may
-- create objects in it.
SELECT has_schema_privilege($1::name, 'core', 'USAGE'),
       coalesce(bool_or(has_schema_privilege(r.oid, 'core', 'CREATE')), false)
FROM pg_roles r
WHERE pg_has_role($1::name, r.oid, 'MEMBER')
