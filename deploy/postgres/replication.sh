#!/bin/sh
# Run by the postgres image's entrypoint (official or stand-in) on the
# primary's first start, from /docker-entrypoint-initdb.d, while its
# temporary server listens on the Unix socket only: the role the standby
# copies and streams with, and the pg_hba line that lets it. The
# entrypoint's own line, host all all all, does not cover replication
# connections, which pg_hba matches only by the word replication. The
# server that starts after this script reads the new pg_hba.conf.
#
# The entrypoint may source this file rather than run it: no exit, no set.
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" --no-password \
	--set pw="${SHOP_PG_REPLICATION_PASSWORD:-replicator}" <<'SQL'
CREATE ROLE replicator WITH LOGIN REPLICATION PASSWORD :'pw';
SQL
printf '\nhost replication replicator all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
