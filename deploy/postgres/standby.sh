#!/bin/sh
# The entrypoint of the ha profile's postgres-standby service
# (docker-compose.yml). On a first start, with its data directory empty,
# it waits for the primary and copies it with pg_basebackup: -R writes
# standby.signal, so the copy starts as a standby; -X stream brings the
# WAL written during the copy; -C -S creates the physical replication slot
# SHOP_PG_SLOT on the primary, so the primary keeps the WAL the standby has
# not received yet (a slot left by an earlier standby is reused). Then,
# and on every later start, it hands over to the image's own entrypoint,
# which gives the data directory to the postgres user and runs postgres
# with the service's command (primary_conninfo and its application_name).
#
# Only what the official image and the stand-in both have: sh,
# pg_isready, psql, pg_basebackup, docker-entrypoint.sh.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
slot=${SHOP_PG_SLOT:-standby1}
primary="host=postgres port=5432 user=replicator dbname=postgres"
export PGPASSWORD="${SHOP_PG_REPLICATION_PASSWORD:-replicator}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	until pg_isready -q -d "$primary"; do
		echo "standby: waiting for the primary"
		sleep 1
	done
	# A copy that stopped half-way leaves files but no PG_VERSION.
	mkdir -p "$PGDATA"
	find "$PGDATA" -mindepth 1 -delete
	create=-C
	if [ "$(psql -d "$primary" -Atc "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$slot'")" != 0 ]; then
		create=
	fi
	echo "standby: copying the primary (pg_basebackup, slot $slot)"
	pg_basebackup -d "$primary" -D "$PGDATA" -R -X stream $create -S "$slot" --checkpoint=fast
	echo "standby: copied; starting as a standby"
fi
unset PGPASSWORD
exec docker-entrypoint.sh "$@"
