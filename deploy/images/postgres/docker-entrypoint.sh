#!/usr/bin/env bash
# What the official postgres image's entrypoint does, for the callers of this
# project (docker-compose.yml, testcontainers' postgres module):
#
#   - arguments starting with "-" are for postgres; `postgres -c fsync=off`
#     (what testcontainers passes) works as is;
#   - on first start, with an empty $PGDATA: initdb with POSTGRES_USER and
#     POSTGRES_PASSWORD (POSTGRES_INITDB_ARGS added), password logins from
#     any host (POSTGRES_HOST_AUTH_METHOD, default scram-sha-256),
#     listen_addresses '*' (from the sample configuration, see build.sh);
#     then a temporary server on the Unix socket only creates POSTGRES_DB and
#     runs /docker-entrypoint-initdb.d/*.sh, *.sql, *.sql.gz, and stops;
#   - the server runs as the postgres user, in the foreground.
#
# So a first start logs "database system is ready to accept connections"
# twice (the temporary server, then the real one), which is what
# testcontainers' postgres.BasicWaitStrategies waits for.
set -Eeo pipefail

log() { printf '%s\n' "$*"; }

init_database() {
	: "${POSTGRES_USER:=postgres}"
	: "${POSTGRES_DB:=$POSTGRES_USER}"
	: "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"
	if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
		log "error: database is uninitialized and POSTGRES_PASSWORD is not set" >&2
		log "       (set POSTGRES_HOST_AUTH_METHOD=trust to allow logins without one)" >&2
		exit 1
	fi
	ls /docker-entrypoint-initdb.d/ >/dev/null

	# POSTGRES_INITDB_ARGS is split into words, as the official image does.
	# shellcheck disable=SC2086
	if [ -n "${POSTGRES_PASSWORD:-}" ]; then
		initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
			${POSTGRES_INITDB_ARGS:-} -D "$PGDATA"
	else
		initdb --username="$POSTGRES_USER" ${POSTGRES_INITDB_ARGS:-} -D "$PGDATA"
	fi
	printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"

	# The temporary server: Unix socket only, so nobody connects before the
	# database is ready.
	local args=("$@")
	[ "${args[0]:-}" = postgres ] && args=("${args[@]:1}")
	args+=(-c listen_addresses='' -p "${PGPORT:-5432}")
	PGUSER="$POSTGRES_USER" pg_ctl -D "$PGDATA" -o "$(printf '%q ' "${args[@]}")" -w start

	export PGPASSWORD="${POSTGRES_PASSWORD:-}"
	local psql=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
	if [ "$POSTGRES_DB" != postgres ]; then
		"${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" <<-'SQL'
			CREATE DATABASE :"db";
		SQL
	fi
	local f
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh)
			if [ -x "$f" ]; then
				log "$0: running $f"
				"$f"
			else
				log "$0: sourcing $f"
				# shellcheck disable=SC1090
				. "$f"
			fi
			;;
		*.sql) log "$0: running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
		*.sql.gz) log "$0: running $f"; gunzip -c "$f" | "${psql[@]}" --dbname "$POSTGRES_DB" ;;
		*) [ -e "$f" ] && log "$0: ignoring $f" ;;
		esac
	done
	unset PGPASSWORD

	PGUSER="$POSTGRES_USER" pg_ctl -D "$PGDATA" -m fast -w stop
	log
	log 'PostgreSQL init process complete; ready for start up.'
	log
}

if [ "${1:0:1}" = '-' ]; then
	set -- postgres "$@"
fi

if [ "$1" = postgres ]; then
	if [ "$(id -u)" = 0 ]; then
		mkdir -p "$PGDATA" /var/run/postgresql
		# A named volume may come from another image, with other owners.
		find "$PGDATA" /var/run/postgresql \! -user postgres -exec chown postgres:postgres '{}' +
		chmod 700 "$PGDATA"
		chmod 3777 /var/run/postgresql
		exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
	fi
	if [ -s "$PGDATA/PG_VERSION" ]; then
		log "PostgreSQL Database directory appears to contain a database; Skipping initialization"
	else
		init_database "$@"
	fi
fi

exec "$@"
