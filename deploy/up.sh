#!/usr/bin/env bash
# Brings the compose stack up in the background and waits until the load
# balancer answers /readyz, saying what it waits for, then prints where
# everything is and the demo user's token.
#
#   deploy/up.sh            (make up)
#
# COMPOSE is the compose command (`docker compose` or `docker-compose`);
# SHOP_PORT and SHOP_GATEWAY_PORT are compose's published ports;
# SHOP_UP_TIMEOUT (seconds, default 300) bounds the wait.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${COMPOSE:-}" ]; then
  if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"; else COMPOSE=docker-compose; fi
fi
port=${SHOP_PORT:-8080}
gateway_port=${SHOP_GATEWAY_PORT:-8081}
timeout=${SHOP_UP_TIMEOUT:-300}
say() { printf '[up] %s\n' "$*" >&2; }

# shellcheck disable=SC2086 # COMPOSE is a command and its subcommand
$COMPOSE up -d
url="http://localhost:$port/readyz"
start=$SECONDS
until [ "$(curl -s -o /dev/null -w '%{http_code}' "$url" 2>/dev/null || true)" = 200 ]; do
  elapsed=$((SECONDS - start))
  if [ "$elapsed" -ge "$timeout" ]; then
    say "$url did not answer 200 within ${timeout}s; the services and their last lines:"
    $COMPOSE ps >&2 || true
    $COMPOSE logs --tail=20 >&2 || true
    exit 1
  fi
  if [ $((elapsed % 5)) -eq 0 ]; then
    # The services that are not up (or healthy) yet, from compose's table.
    waiting=$($COMPOSE ps 2>/dev/null | awk 'NR > 2 && !/Up \(healthy\)|Exit 0|running \(healthy\)|exited \(0\)/ {print $1}' | paste -sd' ' || true)
    say "waiting for $url (${elapsed}s)${waiting:+; not ready yet: $waiting}"
  fi
  sleep 1
done
say "ready in $((SECONDS - start))s"

token=$($COMPOSE logs --no-color seed 2>/dev/null | grep -o 'SHOP_DEMO_TOKEN=[A-Za-z0-9_-]*' | tail -n 1 || true)
cat <<MSG

  API           http://localhost:$port            (docs/API.md; GET /v1/products)
  gateway audit http://localhost:$gateway_port/v1/charges?reference=<order id>
  metrics       per replica on :9090 inside the compose network; with
                --profile observability, Prometheus on http://localhost:${SHOP_PROMETHEUS_PORT:-9091}
  admin token   ${SHOP_ADMIN_TOKEN:-admin-dev-token}
MSG
if [ -n "$token" ]; then
  echo "  demo user     export ${token#SHOP_DEMO_}   # TOKEN=..., for the README's \"Try it\""
fi
echo
echo "  make logs     follow the logs;  make down     stop (make down ARGS=-v also drops the data)"
