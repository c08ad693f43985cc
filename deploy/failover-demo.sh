#!/usr/bin/env bash
# make failover-demo: the shop through a PostgreSQL failover, watched from
# outside (docs/OPERATIONS.md, "PostgreSQL failover in compose").
#
#   1. the stack with the ha profile (deploy/up.sh --ha, its arguments
#      passed on: --no-build), as its own compose project
#      (COMPOSE_PROJECT_NAME, default shop-ha) so it leaves the volumes of
#      make up alone, with the rate limits off (the demo user places more
#      orders than its hourly limit allows); then a check that the standby
#      streams synchronously. A previous demo's stack is removed first
#      (volumes too: its primary was killed), and make up's stack, which
#      holds the same ports, is taken down by deploy/up.sh, its volumes
#      kept, and said so: make up brings it back;
#   2. a bounded stream of orders through the load balancer, one at a
#      time, each with its own Idempotency-Key and, after an answer other
#      than 201, retried with the same key (as a client should); each
#      second, how many answers were 201, 503 and anything else;
#   3. mid-stream, the primary's container is killed (SIGKILL, a crash);
#      a second later deploy/failover.sh promotes the standby;
#   4. at the end: the failover as the clients saw it (from the first
#      answer other than 201 to the first 201 after it), the count of 503
#      and of 500, and whether every order answered 201 is on the new
#      primary. It fails on a 500, on an order missing there, or when no
#      order was placed before the crash or after the promotion.
#
# The stack is left up, the old primary stopped; the last lines say how to
# take it down. If the demo fails anywhere, from its start to its last
# check, it takes its own stack down (volumes too), so no container is
# left behind. Traffic goes to http://localhost:$SHOP_PORT only.
#
# SHOP_FAILOVER_SECONDS (default 20) is how long the stream lasts at least (it
# goes on until 5 s after the promotion, 2 minutes more at most), SHOP_FAILOVER_KILL_AT
# (default 6) is when the primary is killed, SHOP_FAILOVER_MAX_ORDERS
# (default 1000) bounds the orders; COMPOSE and SHOP_PORT as for make up.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${COMPOSE:-}" ]; then
  if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"; else COMPOSE=docker-compose; fi
fi
export COMPOSE
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-shop-ha}
export SHOP_RATE_LIMIT=off
duration=${SHOP_FAILOVER_SECONDS:-20}
kill_at=${SHOP_FAILOVER_KILL_AT:-6}
max_orders=${SHOP_FAILOVER_MAX_ORDERS:-1000}
api=http://localhost:${SHOP_PORT:-8080}
say() { printf '[demo %s] %s\n' "$(date +%T)" "$*"; }
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }

# demo_down removes the demo's project: its containers, of every profile,
# and its volumes.
demo_down() {
  # shellcheck disable=SC2086 # COMPOSE is a command and its subcommand
  COMPOSE_PROFILES=ha,observability,load $COMPOSE down -v --remove-orphans >/dev/null 2>&1 || true
}
work=
stream_pid=
finish() {
  local rc=$?
  [ -z "$stream_pid" ] || kill "$stream_pid" 2>/dev/null || true
  [ -z "$work" ] || rm -rf "$work"
  if [ "$rc" -ne 0 ]; then
    say "the demo failed (exit $rc): taking its stack down ($COMPOSE_PROJECT_NAME, volumes too)"
    demo_down
  fi
  exit "$rc"
}
trap finish EXIT

# Step 1: the stack, and the standby streaming synchronously.
if [ -n "$(docker ps -aq --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME")" ] ||
  [ -n "$(docker volume ls -q --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME")" ]; then
  say "removing the previous demo's stack ($COMPOSE_PROJECT_NAME, volumes too: its primary was killed)"
  demo_down
fi
deploy/up.sh --ha "$@"
# shellcheck source=deploy/env.sh
. deploy/env.sh
use_ha

# shellcheck disable=SC2086 # COMPOSE is a command and its subcommand
psql_on() { $COMPOSE exec -T "$1" psql -U shop -d shop -v ON_ERROR_STOP=1 -At "${@:2}"; }
sync=
for _ in $(seq 30); do
  sync=$(psql_on postgres -c "SELECT application_name || ' ' || sync_state FROM pg_stat_replication" || true)
  [ "$sync" = "standby sync" ] && break
  sleep 1
done
if [ "$sync" != "standby sync" ]; then
  say "the standby does not stream synchronously (pg_stat_replication: '${sync:-nothing}')"
  exit 1
fi
say "the primary replicates to: $sync"

# shellcheck disable=SC2086
token=$($COMPOSE logs --no-color seed 2>/dev/null | grep -o 'SHOP_DEMO_TOKEN=[A-Za-z0-9_-]*' | tail -n 1 | cut -d= -f2 || true)
if [ -z "$token" ]; then
  say "no demo user's token in the seed job's log (SHOP_DEMO=false?)"
  exit 1
fi

# Step 2: the stream, in the background. Each answer is a line of
# $answers: milliseconds since the start, status, order id (for a 201).
work=$(mktemp -d /tmp/shop-failover.XXXXXX)
answers=$work/answers
: >"$answers"
start=$(now_ms)
run=$(date +%s)
# going says whether the stream goes on: for the demo's duration, and in
# any case until 5 s after the promotion (a busy machine makes the kill
# and the promotion late), but never past the duration and 2 minutes.
going() {
  local t=$(( $(now_ms) - start ))
  [ "$t" -lt $(( (duration + 120) * 1000 )) ] || return 1
  [ "$t" -lt $((duration * 1000)) ] && return 0
  [ -f "$work/promoted" ] && [ "$(now_ms)" -ge $(( $(cat "$work/promoted") + 5000 )) ] && return 1
  return 0
}
stream() {
  local n=0 attempt=0 status body id t second=0 ok=0 unavailable=0 other=0
  while going && [ "$n" -lt "$max_orders" ]; do
    attempt=$((attempt + 1))
    status=$(curl -s -o "$work/body" -w '%{http_code}' --max-time 5 -XPOST "$api/v1/orders" \
      -H "Authorization: Bearer $token" -H "Idempotency-Key: failover-$run-$n" \
      -d '{"items":[{"sku":"STICKER-PACK","quantity":1}]}' 2>/dev/null || true)
    t=$(( $(now_ms) - start ))
    id=
    if [ "$status" = 201 ]; then
      id=$(grep -o '"id":"[0-9a-f-]*"' "$work/body" | head -n 1 | cut -d'"' -f4 || true)
      ok=$((ok + 1))
      n=$((n + 1)) # the next order; any other answer retries this one's key
    elif [ "$status" = 503 ]; then
      unavailable=$((unavailable + 1))
    else
      other=$((other + 1))
    fi
    echo "$t $status $id" >>"$answers"
    if [ $((t / 1000)) -gt "$second" ]; then
      printf '[demo  +%2ds] 201: %4d   503: %4d   other: %4d\n' "$second" "$ok" "$unavailable" "$other"
      second=$((t / 1000)) ok=0 unavailable=0 other=0
    fi
    [ "$status" = 201 ] || sleep 0.1
  done
  if [ $((ok + unavailable + other)) -gt 0 ]; then
    printf '[demo  +%2ds] 201: %4d   503: %4d   other: %4d\n' "$second" "$ok" "$unavailable" "$other"
  fi
}
say "placing orders through $api for ${duration}s, and until 5 s after the promotion (at most $max_orders); the primary is killed at +${kill_at}s"
stream &
stream_pid=$!

# Step 3: the crash, and the promotion a second later.
sleep "$kill_at"
# shellcheck disable=SC2086
primary=$($COMPOSE ps -q postgres)
say "killing the primary's container (docker kill -s KILL ${primary:0:12})"
docker kill -s KILL "$primary" >/dev/null
sleep 1
say "promoting the standby (deploy/failover.sh)"
deploy/failover.sh
now_ms >"$work/promoted.tmp" && mv "$work/promoted.tmp" "$work/promoted"
wait "$stream_pid"
stream_pid=

# Step 4: what the clients saw, and what the new primary holds.
read -r total created unavailable errors others first_bad first_ok_after <<<"$(awk '
  { total++ }
  $2 == 201 { created++; if (bad != "" && okafter == "") okafter = $1 }
  $2 == 503 { unavailable++ }
  $2 == 500 { errors++ }
  $2 != 201 && $2 != 503 && $2 != 500 { others++ }
  $2 != 201 && bad == "" { bad = $1 }
  END { printf "%d %d %d %d %d %s %s\n", total, created, unavailable, errors, others, (bad == "" ? "-" : bad), (okafter == "" ? "-" : okafter) }
' "$answers")"
awk '$2 == 201 { print $3 }' "$answers" | sort -u >"$work/ids"
distinct=$(wc -l <"$work/ids")
before=$(awk -v k=$((kill_at * 1000)) '$2 == 201 && $1 < k' "$answers" | wc -l)
found=$({ printf "SELECT count(*) FROM orders WHERE id = ANY ('{%s}'::uuid[]);\n" "$(paste -sd, "$work/ids")"; } |
  psql_on postgres-standby -f - 2>/dev/null || echo "?")

echo
echo "  requests           $total (orders answered 201: $created, distinct ids: $distinct; before the kill: $before)"
echo "  answered 503       $unavailable"
echo "  answered 500       $errors"
echo "  other answers      $others (curl's 000: no answer within its timeout)"
if [ "$first_bad" != - ] && [ "$first_ok_after" != - ]; then
  printf '  failover seen      %d ms (first answer other than 201 at +%d ms, first 201 after it at +%d ms)\n' \
    $((first_ok_after - first_bad)) "$first_bad" "$first_ok_after"
else
  echo "  failover seen      - (first answer other than 201: $first_bad; first 201 after it: $first_ok_after)"
fi
echo "  on the new primary $found of the $distinct orders answered 201"
echo
echo "  The stack is still up, its old primary stopped (rejoining it is an operator's job: docs/OPERATIONS.md)."
echo "  Take it down with: COMPOSE_PROJECT_NAME=$COMPOSE_PROJECT_NAME make down ARGS=-v"
echo "  (make up takes it down too, and brings back make up's stack.)"

fail=
[ "$errors" -eq 0 ] || fail="$fail; $errors answers were 500"
[ "$found" = "$distinct" ] || fail="$fail; $found of $distinct orders answered 201 are on the new primary"
[ "$before" -gt 0 ] || fail="$fail; no order was placed before the kill"
[ "$first_ok_after" != - ] || fail="$fail; no order was placed after the promotion"
if [ -n "$fail" ]; then
  say "FAILED${fail}"
  exit 1
fi
say "the shop survived the failover: no 500, every order answered 201 on the new primary"
