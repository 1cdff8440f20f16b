#!/bin/sh
# Initialises a cluster on first start, then runs PostgreSQL in the foreground (PID 1), with the
# settings of the throwaway clusters of muster-devdb: fsync off, enough connections for parallel
# tests. Extra arguments go to `postgres` (`-c name=value`).
set -eu
bin=/usr/lib/postgresql/15/bin
data=/var/lib/muster-pg/data
if [ ! -s "$data/PG_VERSION" ]; then
    "$bin/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    echo "host all all 0.0.0.0/0 trust" >> "$data/pg_hba.conf"
fi
exec "$bin/postgres" -D "$data" -c listen_addresses='*' -c fsync=off -c synchronous_commit=off \
    -c full_page_writes=off -c max_connections=300 -c unix_socket_directories=/tmp "$@"
