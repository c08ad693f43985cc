#!/usr/bin/env bash
# Brings the compose stack up in the background and waits until the load
# balancer answers /readyz, saying what it waits for, then prints where
# everything is and the demo user's token. It works on a Docker engine that
# cannot reach any registry, with docker-compose 1.29 or the plugin:
#
#   1. the base images compose and the Dockerfile need (POSTGRES_IMAGE,
#      REDIS_IMAGE, NGINX_IMAGE, GO_IMAGE, RUNTIME_IMAGE; .env may name
#      stand-ins): a missing one is pulled, and when one cannot be pulled
#      deploy/images/build.sh builds the local stand-ins (as root; minutes
#      the first time) and writes .env and .images/env, which the rest of
#      the script uses;
#   2. the shop image (deploy/images/shop-image.sh, as `make image`);
#   3. `compose up -d`, in the background: it returns only once every
#      healthcheck it waits on has passed, so the script polls meanwhile,
#      saying every 5 s which services are not ready, until compose is done
#      and /readyz answers 200.
#
#   deploy/up.sh [--dry-run] [--no-build] [--observability] [--ha]
#                                   (make up; make up-observability;
#                                    make failover-demo)
#
# --dry-run says what steps 1-3 would do and does none of them; --no-build
# skips step 2 when the shop image exists. --observability adds the
# observability profile: Prometheus (PROMETHEUS_IMAGE) and Jaeger
# (JAEGER_IMAGE; on an engine that cannot pull it, its stand-in, built from
# Jaeger's Go module by deploy/images/build.sh jaeger, 3 to 8 minutes the
# first time), with the replicas, the gateway and the mailer sending their
# spans to Jaeger (SHOP_OTLP_ENDPOINT, default http://jaeger:4318), and
# prints Jaeger's address. --ha adds the ha profile with the settings of
# deploy/ha.env: a synchronous standby of PostgreSQL, the primary waiting
# for it on every commit, and every service's database URL naming both
# servers (docs/OPERATIONS.md, "PostgreSQL failover in compose"). Times are
# counted from the start of the script.
#
# COMPOSE is the compose command (`docker compose` or `docker-compose`);
# SHOP_PORT, SHOP_GATEWAY_PORT, SHOP_PROMETHEUS_PORT and SHOP_JAEGER_PORT
# are compose's published ports;
# SHOP_UP_TIMEOUT (seconds, default 600) bounds the wait for compose and
# /readyz; SHOP_UP_PULL_TIMEOUT (seconds, default 60) bounds each pull.
set -euo pipefail
cd "$(dirname "$0")/.."

dry_run=false
build=true
observability=false
ha=false
for a in "$@"; do
  case "$a" in
    --dry-run) dry_run=true ;;
    --no-build) build=false ;;
    --observability) observability=true ;;
    --ha) ha=true ;;
    *) echo "usage: $0 [--dry-run] [--no-build] [--observability] [--ha]" >&2; exit 2 ;;
  esac
done

if [ -z "${COMPOSE:-}" ]; then
  if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"; else COMPOSE=docker-compose; fi
fi
port=${SHOP_PORT:-8080}
gateway_port=${SHOP_GATEWAY_PORT:-8081}
timeout=${SHOP_UP_TIMEOUT:-600}
pull_timeout=${SHOP_UP_PULL_TIMEOUT:-60}
say() { printf '[up %3ds] %s\n' "$SECONDS" "$*" >&2; }

# shellcheck source=deploy/env.sh
. deploy/env.sh # load_env, use_ha

# The base images, as docker-compose.yml and the Dockerfile default them,
# and the observability profile's.
base_images() {
  printf '%s\n' "${POSTGRES_IMAGE:-postgres:16-alpine}" "${REDIS_IMAGE:-redis:7-alpine}" \
    "${NGINX_IMAGE:-nginx:1.27-alpine}" "${GO_IMAGE:-golang:1.26-alpine}" "${RUNTIME_IMAGE:-alpine:3.22}"
  if $observability; then
    printf '%s\n' "${PROMETHEUS_IMAGE:-prom/prometheus:v2.55.1}"
  fi
}
jaeger_image() { echo "${JAEGER_IMAGE:-jaegertracing/jaeger:2.12.0}"; }

missing_images() {
  local img
  for img in $(base_images); do
    docker image inspect "$img" >/dev/null 2>&1 || echo "$img"
  done
}

# Jaeger's stand-in is slow to build and only the observability profile
# needs it, so it is asked for on its own.
jaeger_missing() {
  $observability && ! docker image inspect "$(jaeger_image)" >/dev/null 2>&1
}

# pull_all pulls each image named, and fails at the first that cannot be.
pull_all() {
  local img
  for img in "$@"; do
    say "pulling $img"
    if ! timeout "$pull_timeout" docker pull -q "$img" >/dev/null 2>&1; then
      say "$img cannot be pulled: no registry reachable from the Docker engine"
      return 1
    fi
  done
}

# Step 1: the base images.
load_env .env
missing=$(missing_images | paste -sd' ' || true)
if [ -n "$missing" ]; then
  if $dry_run; then
    say "missing: $missing; would pull them, and if one cannot be pulled, build the local stand-ins (deploy/images/build.sh)"
  else
    # shellcheck disable=SC2086 # a list of image names
    if ! pull_all $missing; then
      say "building the local stand-in images (deploy/images/build.sh; minutes the first time)"
      deploy/images/build.sh
      load_env .images/env override
      missing=$(missing_images | paste -sd' ' || true)
      if [ -n "$missing" ]; then
        say "still missing after deploy/images/build.sh: $missing"
        exit 1
      fi
      say "stand-in images ready; .env names them for compose, make and the next run"
    fi
  fi
else
  say "base images present: $(base_images | paste -sd' ')"
fi
if jaeger_missing; then
  if $dry_run; then
    say "missing: $(jaeger_image); would pull it, and if it cannot be pulled, build its stand-in (deploy/images/build.sh jaeger; 3 to 8 minutes the first time)"
  elif ! pull_all "$(jaeger_image)"; then
    say "building Jaeger's stand-in from its Go module (deploy/images/build.sh jaeger; 3 to 8 minutes the first time)"
    deploy/images/build.sh jaeger
    load_env .images/env override
    if jaeger_missing; then
      say "still missing after deploy/images/build.sh jaeger: $(jaeger_image)"
      exit 1
    fi
  fi
fi

# Step 2: the shop image.
shop_image=${SHOP_IMAGE:-shop:local}
if ! $build && docker image inspect "$shop_image" >/dev/null 2>&1; then
  say "using the shop image $shop_image as it is (--no-build)"
elif $dry_run; then
  say "would build the shop image $shop_image (deploy/images/shop-image.sh)"
else
  say "building the shop image $shop_image (deploy/images/shop-image.sh)"
  deploy/images/shop-image.sh
fi

# Step 3: compose, in the background, and the wait. The profile and the
# endpoint reach every compose command below (ps, logs) through the
# environment; docker-compose 1.29 and the plugin both read
# COMPOSE_PROFILES.
url="http://localhost:$port/readyz"
run_env=
if $observability; then
  export COMPOSE_PROFILES="${COMPOSE_PROFILES:+$COMPOSE_PROFILES,}observability"
  export SHOP_OTLP_ENDPOINT="${SHOP_OTLP_ENDPOINT:-http://jaeger:4318}"
  run_env="COMPOSE_PROFILES=$COMPOSE_PROFILES SHOP_OTLP_ENDPOINT=$SHOP_OTLP_ENDPOINT "
fi
if $ha; then
  use_ha
  run_env="COMPOSE_PROFILES=$COMPOSE_PROFILES ${SHOP_OTLP_ENDPOINT:+SHOP_OTLP_ENDPOINT=$SHOP_OTLP_ENDPOINT }(and deploy/ha.env) "
fi
if $dry_run; then
  say "would run: $run_env$COMPOSE up -d, then wait for $url to answer 200"
  exit 0
fi
log=$(mktemp /tmp/shop-up.XXXXXX)
trap 'rm -f "$log"' EXIT
say "starting the stack: $run_env$COMPOSE up -d"
# shellcheck disable=SC2086 # COMPOSE is a command and its subcommand
$COMPOSE up -d >"$log" 2>&1 &
compose_pid=$!
compose_rc=
last_said=-5
while :; do
  if [ -z "$compose_rc" ] && ! kill -0 "$compose_pid" 2>/dev/null; then
    compose_rc=0
    wait "$compose_pid" || compose_rc=$?
    if [ "$compose_rc" -ne 0 ]; then
      say "$COMPOSE up -d failed (exit $compose_rc):"
      cat "$log" >&2
      exit 1
    fi
    say "compose is done: every service it waits on is healthy"
  fi
  if [ -n "$compose_rc" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url" 2>/dev/null || true)" = 200 ]; then
    break
  fi
  if [ "$SECONDS" -ge "$timeout" ]; then
    say "$url did not answer 200 within ${timeout}s; the services and their last lines:"
    $COMPOSE ps >&2 || true
    $COMPOSE logs --tail=20 >&2 || true
    exit 1
  fi
  if [ $((SECONDS - last_said)) -ge 5 ]; then
    last_said=$SECONDS
    # The services that are not up (or healthy) yet, from compose's table,
    # and compose's own last line.
    waiting=$($COMPOSE ps 2>/dev/null | awk 'NR > 2 && !/Up \(healthy\)|Exit 0|running \(healthy\)|exited \(0\)/ {print $1}' | paste -sd' ' || true)
    doing=$(tail -n 1 "$log" 2>/dev/null | tr -cd '[:print:]' | cut -c1-80 || true)
    if [ -z "$compose_rc" ]; then what="compose up -d"; else what=$url; fi
    say "waiting for $what${waiting:+; not ready yet: $waiting}${doing:+; compose: $doing}"
  fi
  sleep 1
done
say "ready in ${SECONDS}s"

token=$($COMPOSE logs --no-color seed 2>/dev/null | grep -o 'SHOP_DEMO_TOKEN=[A-Za-z0-9_-]*' | tail -n 1 || true)
cat <<MSG

  API           http://localhost:$port            (docs/API.md; GET /v1/products)
  gateway audit http://localhost:$gateway_port/v1/charges?reference=<order id>
  metrics       per replica on :9090 inside the compose network; with
                --profile observability, Prometheus on http://localhost:${SHOP_PROMETHEUS_PORT:-9091}
  admin token   ${SHOP_ADMIN_TOKEN:-admin-dev-token}
MSG
if $observability; then
  cat <<MSG
  traces        Jaeger on http://localhost:${SHOP_JAEGER_PORT:-16686}   (every replica, the gateway and the mailer send
                their spans to $SHOP_OTLP_ENDPOINT; a trace: http://localhost:${SHOP_JAEGER_PORT:-16686}/trace/<trace_id>)
  exemplars     Prometheus on http://localhost:${SHOP_PROMETHEUS_PORT:-9091} keeps the latency's trace ids (docs/OPERATIONS.md, "Traces")
MSG
fi
if $ha; then
  cat <<MSG
  PostgreSQL    the primary (postgres) and its synchronous standby (postgres-standby); every
                service connects to whichever accepts writes; deploy/failover.sh promotes the standby
MSG
fi
if [ -n "$token" ]; then
  echo "  demo user     export ${token#SHOP_DEMO_}   # TOKEN=..., for the README's \"Try it\""
fi
echo
echo "  make logs     follow the logs;  make down     stop (make down ARGS=-v also drops the data)"
