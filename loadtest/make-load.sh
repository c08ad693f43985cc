#!/usr/bin/env bash
# `make load`: a bundled k6 script against the running compose stack (make
# up), run by `shop load` (bin/shop; no k6 needed).
#
#   SCRIPT=loadtest/k6/flash-sale.js VUS=50 DURATION=20s loadtest/make-load.sh
#
# SCRIPT is a path or a name of loadtest/k6 (flash-sale, or flash-sale.js);
# VUS and DURATION are k6's --vus and --duration (DURATION replaces the
# script's scenarios with its default function, as in k6; mixed.js has
# none: give it LOAD_ARGS='-e DURATION=20s' instead); LOAD_ARGS passes
# more flags (-e BUYERS=100). The summary goes to the terminal and to
# $LOAD_OUT/summary.txt, with summary.json (k6's --summary-export) and
# report.html beside it.
#
# The scripts register dozens of users from one address and send writes
# far faster than a person, which the rate limits refuse. When the stack's
# replicas run with them on, this restarts the two replicas with
# SHOP_RATE_LIMIT=off (and the balancer, which resolves them at start);
# `make up` puts them back on.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${COMPOSE:-}" ]; then
  if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"; else COMPOSE=docker-compose; fi
fi
BIN=${BIN:-bin/shop}
OUT=${LOAD_OUT:-bin/load}
port=${SHOP_PORT:-8080}
gateway_port=${SHOP_GATEWAY_PORT:-8081}
say() { printf '[load] %s\n' "$*" >&2; }

script=${SCRIPT:-smoke}
case "$script" in
  *.js) [ -f "$script" ] || [ ! -f "loadtest/k6/$script" ] || script=loadtest/k6/$script ;;
  *) script=loadtest/k6/$script.js ;;
esac
if [ ! -f "$script" ]; then
  say "no $script; scripts: $(cd loadtest/k6 && ls ./*.js | sed 's|^\./||' | tr '\n' ' ')"
  exit 2
fi

# shellcheck disable=SC2086 # COMPOSE is a command and its subcommand
api=$($COMPOSE ps -q api-1 2>/dev/null || true)
if [ -z "$api" ] || [ "$(docker inspect -f '{{.State.Running}}' "$api" 2>/dev/null)" != true ]; then
  say "the compose stack is not running: start it with make up, then run make load again"
  exit 1
fi
if ! docker inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$api" | grep -qx 'SHOP_RATE_LIMIT=off'; then
  say "the stack runs with the rate limits on, which refuse a load test's registrations and writes;"
  say "restarting api-1 and api-2 with SHOP_RATE_LIMIT=off (make up turns them back on)"
  # shellcheck disable=SC2086
  SHOP_RATE_LIMIT=off $COMPOSE up -d --no-deps api-1 api-2
  # shellcheck disable=SC2086
  $COMPOSE restart lb
  url="http://localhost:$port/readyz"
  for _ in $(seq 1 120); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$url" 2>/dev/null || true)" = 200 ] && break
    sleep 1
  done
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$url" 2>/dev/null || true)" = 200 ] || { say "$url did not answer 200 in 120s"; exit 1; }
fi

mkdir -p "$OUT"
args=(-e "BASE_URL=http://localhost:$port" -e "GATEWAY_URL=http://localhost:$gateway_port"
  -e "ADMIN_TOKEN=${SHOP_ADMIN_TOKEN:-admin-dev-token}"
  --summary-export "$OUT/summary.json" --report "$OUT/report.html")
[ -n "${VUS:-}" ] && args+=(--vus "$VUS")
[ -n "${DURATION:-}" ] && args+=(--duration "$DURATION")
# shellcheck disable=SC2206 # LOAD_ARGS is flags, split on spaces
args+=(${LOAD_ARGS:-})
say "$BIN load ${args[*]} $script"
set +e
# The script sees the process's environment in __ENV, as with k6: keep
# this command's own settings out of it (mixed.js reads DURATION).
env -u SCRIPT -u VUS -u DURATION -u LOAD_ARGS "$BIN" load "${args[@]}" "$script" | tee "$OUT/summary.txt"
code=${PIPESTATUS[0]}
set -e
say "exit $code (0: every threshold held, 99: a threshold failed, 107: a script error or a failed teardown)"
say "summary: $OUT/summary.txt, $OUT/summary.json; report: $OUT/report.html"
exit "$code"
