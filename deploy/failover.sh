#!/usr/bin/env bash
# Fails the compose stack's PostgreSQL over to the ha profile's standby
# (make failover-demo; docs/OPERATIONS.md, "PostgreSQL failover in
# compose"):
#
#   1. the old primary (service postgres) is stopped, and stays stopped:
#      the services' URL names it first, and were it to come back as a
#      primary beside the promoted standby, the two would take writes
#      apart. Already dead (a crash, docker kill), this is a no-op. Rejoining
#      it as a standby of the new primary is an operator's job (pg_rewind
#      or a fresh pg_basebackup), not this script's;
#   2. the standby (postgres-standby) is promoted (pg_ctl promote, which
#      waits until it accepts writes). Its synchronous_standby_names is
#      empty, so its commits wait for no one.
#
# The replicas need no restart: their database URL names both servers
# with target_session_attrs=read-write, and each new connection goes to
# whichever accepts writes.
#
#   deploy/failover.sh
#
# COMPOSE is the compose command (`docker compose` or `docker-compose`);
# COMPOSE_PROJECT_NAME the stack's, as for make failover-demo.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${COMPOSE:-}" ]; then
  if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"; else COMPOSE=docker-compose; fi
fi
say() { printf '[failover] %s\n' "$*" >&2; }

# The ha profile, so compose knows the standby, with deploy/ha.env's
# settings where the shell has none (as deploy/up.sh --ha reads them).
# shellcheck source=deploy/env.sh
. deploy/env.sh
use_ha

# shellcheck disable=SC2086 # COMPOSE is a command and its subcommand
if [ -z "$($COMPOSE ps -q postgres-standby 2>/dev/null)" ]; then
  say "no postgres-standby container: start the stack with the ha profile first (deploy/up.sh --ha)"
  exit 1
fi
say "stopping the old primary (postgres) for good"
$COMPOSE stop -t 0 postgres >/dev/null 2>&1
say "promoting postgres-standby"
$COMPOSE exec -T -u postgres postgres-standby sh -c 'pg_ctl promote -w -D "$PGDATA"'
role=$($COMPOSE exec -T -u postgres postgres-standby psql -U shop -d shop -Atc \
  "SELECT CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE 'primary' END")
say "postgres-standby is now the $role"
[ "$role" = primary ]
