#!/usr/bin/env bash
# Brings the compose stack up in the background and waits until the load
# balancer answers /readyz, saying what it waits for, then prints where
# everything is and the demo user's token. It works on a Docker engine that
# cannot reach any registry, with docker-compose 1.29 or the plugin:
#
#   1. the shop's binary, started in the background at once when the host
#      has Go (deploy/images/shop-image.sh --binary, with the host's Go
#      build cache), while the base images are made;
#   2. the base images compose needs (POSTGRES_IMAGE, REDIS_IMAGE,
#      NGINX_IMAGE, RUNTIME_IMAGE, and GO_IMAGE when the host has no Go;
#      .env may name stand-ins): a missing one is pulled, and when one
#      cannot be pulled deploy/images/build.sh builds the stand-ins of the
#      missing ones only (as root, installing debootstrap if it must; a few
#      minutes the first time) and writes .env and .images/env, which the
#      rest of the script uses;
#   3. the shop image (deploy/images/shop-image.sh, as `make image`): the
#      binary of step 1 copied onto the runtime image, or the Dockerfile's
#      build without Go on the host;
#   4. the ports: a container of another compose project of this checkout
#      (the failover demo's, say) that holds one of the stack's ports is
#      taken down, its volumes kept, and the script says so; one of this
#      project is the stack being brought up again (compose reuses it);
#      anything else on a port stops the script before it starts anything;
#   5. `compose up -d`, in the background: it returns only once every
#      healthcheck it waits on has passed, so the script polls meanwhile,
#      saying every 5 s which services are not ready, until compose is done
#      and /readyz answers 200. If compose fails, the containers this run
#      created are removed (all of the project's, when none ran before).
#
#   deploy/up.sh [--dry-run] [--no-build] [--observability] [--ha]
#                                   (make up; make up-observability;
#                                    make failover-demo)
#
# --dry-run says what steps 1-5 would do and does none of them; --no-build
# skips steps 1 and 3 when the shop image exists. --observability adds the
# observability profile: Prometheus (PROMETHEUS_IMAGE) and Jaeger
# (JAEGER_IMAGE; on an engine that cannot pull it, its stand-in, built from
# Jaeger's Go module by deploy/images/build.sh jaeger, 3 to 8 minutes the
# first time), with the replicas, the gateway and the mailer sending their
# spans to Jaeger (SHOP_OTLP_ENDPOINT, default http://jaeger:4318), and
# prints the shop's trace page (/web/trace.html, which reads Jaeger's
# query API through the balancer). --ha adds the ha profile with the settings of
# deploy/ha.env: a synchronous standby of PostgreSQL, the primary waiting
# for it on every commit, and every service's database URL naming both
# servers (docs/OPERATIONS.md, "PostgreSQL failover in compose"). Times are
# counted from the start of the script.
#
# COMPOSE is the compose command (`docker compose` or `docker-compose`);
# SHOP_PORT, SHOP_GATEWAY_PORT, SHOP_MAILER_PORT, SHOP_PROMETHEUS_PORT and
# SHOP_JAEGER_PORT are compose's published ports; SHOP_IMAGE_BUILD (host or
# docker) as for deploy/images/shop-image.sh;
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
load_env .env
export PATH="$PATH:/usr/local/go/bin"

# The shop image is built from a binary compiled on the host when it has
# Go, else by the Dockerfile on GO_IMAGE (deploy/images/shop-image.sh).
shop_image=${SHOP_IMAGE:-shop:local}
image_build=${SHOP_IMAGE_BUILD:-}
if [ -z "$image_build" ]; then
  if command -v go >/dev/null; then image_build=host; else image_build=docker; fi
fi
build_shop=true
if ! $build && docker image inspect "$shop_image" >/dev/null 2>&1; then
  build_shop=false
fi

# Step 1: the binary, in the background, while the base images are made.
work=$(mktemp -d /tmp/shop-up.XXXXXX)
binary_pid=
cleanup() {
  [ -z "$binary_pid" ] || kill "$binary_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
if $build_shop && [ "$image_build" = host ]; then
  if $dry_run; then
    say "would build the shop's binary on the host in the background ($(go env GOVERSION); deploy/images/shop-image.sh --binary)"
  else
    say "building the shop's binary on the host in the background ($(go env GOVERSION), Go build cache $(go env GOCACHE))"
    deploy/images/shop-image.sh --binary >"$work/binary.log" 2>&1 &
    binary_pid=$!
  fi
fi

# The base images, each with the variable that names it and its stand-in
# in deploy/images/build.sh, as docker-compose.yml and the Dockerfile
# default them: GO_IMAGE only for the Dockerfile's build, and the
# observability profile's Prometheus.
base_images() {
  printf '%s %s %s\n' POSTGRES_IMAGE postgres "${POSTGRES_IMAGE:-postgres:16-alpine}" \
    REDIS_IMAGE redis "${REDIS_IMAGE:-redis:7-alpine}" \
    NGINX_IMAGE nginx "${NGINX_IMAGE:-nginx:1.27-alpine}"
  if $build_shop; then
    printf '%s %s %s\n' RUNTIME_IMAGE debian "${RUNTIME_IMAGE:-alpine:3.22}"
    if [ "$image_build" = docker ]; then
      printf '%s %s %s\n' GO_IMAGE golang "${GO_IMAGE:-golang:1.26-alpine}"
    fi
  fi
  if $observability; then
    printf '%s %s %s\n' PROMETHEUS_IMAGE prometheus "${PROMETHEUS_IMAGE:-prom/prometheus:v2.55.1}"
  fi
}
jaeger_image() { echo "${JAEGER_IMAGE:-jaegertracing/jaeger:2.12.0}"; }

# missing prints the missing base images' names, or with "standins"
# the stand-ins that would replace them.
missing() {
  local var name img
  while read -r var name img; do
    docker image inspect "$img" >/dev/null 2>&1 && continue
    if [ "${1:-}" = standins ]; then echo "$name"; else echo "$img"; fi
  done < <(base_images)
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

# Step 2: the base images.
missing_list=$(missing | paste -sd' ' || true)
if [ -n "$missing_list" ]; then
  standins=$(missing standins | paste -sd' ' || true)
  if $dry_run; then
    say "missing: $missing_list; would pull them, and if one cannot be pulled, build their stand-ins (deploy/images/build.sh $standins)"
  else
    # shellcheck disable=SC2086 # a list of image names
    if ! pull_all $missing_list; then
      say "building the stand-ins of the missing images (deploy/images/build.sh $standins; a few minutes the first time)"
      # shellcheck disable=SC2086 # a list of image names
      deploy/images/build.sh $standins
      load_env .images/env override
      missing_list=$(missing | paste -sd' ' || true)
      if [ -n "$missing_list" ]; then
        say "still missing after deploy/images/build.sh: $missing_list"
        exit 1
      fi
      say "stand-in images ready; .env names them for compose, make and the next run"
    fi
  fi
else
  say "base images present: $(base_images | awk '{print $3}' | paste -sd' ')"
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

# Step 3: the shop image.
if ! $build_shop; then
  say "using the shop image $shop_image as it is (--no-build)"
elif $dry_run; then
  say "would build the shop image $shop_image (deploy/images/shop-image.sh, $image_build)"
else
  if [ -n "$binary_pid" ]; then
    say "waiting for the shop's binary"
    if ! wait "$binary_pid"; then
      binary_pid=
      say "the shop's binary did not build:"
      cat "$work/binary.log" >&2
      exit 1
    fi
    binary_pid=
  fi
  say "building the shop image $shop_image (deploy/images/shop-image.sh, $image_build)"
  SHOP_IMAGE_BUILD=$image_build deploy/images/shop-image.sh
fi

# Step 4: the ports. The profile and the endpoint reach every compose
# command below (ps, logs, down) through the environment; docker-compose
# 1.29 and the plugin both read COMPOSE_PROFILES.
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
ports="$port $gateway_port ${SHOP_MAILER_PORT:-8082}"
if $observability; then ports="$ports ${SHOP_PROMETHEUS_PORT:-9091} ${SHOP_JAEGER_PORT:-16686}"; fi
# shellcheck disable=SC2086 # COMPOSE is a command and its subcommand
ours=$($COMPOSE ps -q 2>/dev/null | paste -sd' ' || true)
here=$(pwd -P)
for p in $ports; do
  holder=$(docker ps --no-trunc --filter "publish=$p" --format '{{.ID}} {{.Label "com.docker.compose.project"}} {{.Label "com.docker.compose.project.working_dir"}}' | head -n 1)
  if [ -n "$holder" ]; then
    read -r id project dir <<<"$holder"
    [[ " $ours " == *" $id "* ]] && continue
    if [ -n "$project" ] && [ "$(cd "$dir" 2>/dev/null && pwd -P)" = "$here" ]; then
      if $dry_run; then
        say "port $p is the compose project $project's, of this checkout: would take it down (its volumes kept)"
      else
        say "port $p is the compose project $project's, of this checkout: taking it down (its volumes kept; COMPOSE_PROJECT_NAME=$project make down ARGS=-v drops them)"
        # shellcheck disable=SC2086
        if ! COMPOSE_PROJECT_NAME=$project COMPOSE_PROFILES=ha,observability,load $COMPOSE down --remove-orphans >"$work/down.log" 2>&1; then
          cat "$work/down.log" >&2
          say "could not take the compose project $project down"
          exit 1
        fi
      fi
      continue
    fi
    say "port $p is taken by the container ${id:0:12}${project:+ of the compose project $project in $dir}: stop it, or choose other ports (SHOP_PORT, SHOP_GATEWAY_PORT, SHOP_MAILER_PORT, SHOP_PROMETHEUS_PORT, SHOP_JAEGER_PORT)"
    exit 1
  elif (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    say "port $p is taken by a process of this host, not a container: stop it, or choose other ports (SHOP_PORT, SHOP_GATEWAY_PORT, SHOP_MAILER_PORT, SHOP_PROMETHEUS_PORT, SHOP_JAEGER_PORT)"
    exit 1
  fi
done

# Step 5: compose, in the background, and the wait.
url="http://localhost:$port/readyz"
if $dry_run; then
  say "would run: $run_env$COMPOSE up -d, then wait for $url to answer 200"
  exit 0
fi
log=$work/compose.log
if [ -n "$ours" ]; then
  say "the stack runs already: compose keeps what has not changed"
fi
say "starting the stack: $run_env$COMPOSE up -d"
# The wait is bounded from here: the builds before it take what they take.
wait_start=$SECONDS
# shellcheck disable=SC2086 # COMPOSE is a command and its subcommand
$COMPOSE up -d >"$log" 2>&1 &
compose_pid=$!
compose_rc=
last_said=-5

# failed removes what compose created in this run that does not run:
# every container of the project when none ran before, else the ones
# created and never started.
failed() {
  local ids
  if [ -z "$ours" ]; then
    say "removing the containers this run created ($COMPOSE down; the volumes are kept)"
    # shellcheck disable=SC2086
    $COMPOSE down --remove-orphans >/dev/null 2>&1 || true
  else
    # shellcheck disable=SC2086
    ids=$($COMPOSE ps -q 2>/dev/null | xargs -r docker inspect -f '{{.Id}} {{.State.Status}}' 2>/dev/null | awk '$2 == "created" {print $1}' || true)
    if [ -n "$ids" ]; then
      say "removing the containers this run created and did not start"
      # shellcheck disable=SC2086
      docker rm -f $ids >/dev/null 2>&1 || true
    fi
  fi
  exit 1
}

while :; do
  if [ -z "$compose_rc" ] && ! kill -0 "$compose_pid" 2>/dev/null; then
    compose_rc=0
    wait "$compose_pid" || compose_rc=$?
    if [ "$compose_rc" -ne 0 ]; then
      say "$COMPOSE up -d failed (exit $compose_rc):"
      cat "$log" >&2
      failed
    fi
    say "compose is done: every service it waits on is healthy"
    # nginx resolves the replicas' names when it starts: replicas that
    # compose recreated in a running stack (a new profile, new settings)
    # may have new addresses, so the balancer starts again too.
    if [ -n "$ours" ] && grep -qiE 'recreat[a-z]* +[^ ]*api-[12]|api-[12][^ ]* +recreat' "$log"; then
      say "the replicas were recreated: restarting the load balancer, which resolves them when it starts"
      # shellcheck disable=SC2086
      $COMPOSE restart lb >>"$log" 2>&1 || true
    fi
  fi
  if [ -n "$compose_rc" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url" 2>/dev/null || true)" = 200 ]; then
    break
  fi
  if [ $((SECONDS - wait_start)) -ge "$timeout" ]; then
    say "$url did not answer 200 within ${timeout}s; the services and their last lines:"
    $COMPOSE ps >&2 || true
    $COMPOSE logs --tail=20 >&2 || true
    [ -n "$compose_rc" ] || kill "$compose_pid" 2>/dev/null || true
    failed
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

  shop          http://localhost:$port/            (the pages: docs/PAGES.md; the API: docs/API.md, GET /v1/products)
  gateway audit http://localhost:$gateway_port/v1/charges?reference=<order id>
  metrics       per replica on :9090 inside the compose network; with
                make up-observability, Prometheus on http://localhost:${SHOP_PROMETHEUS_PORT:-9091}
  admin token   ${SHOP_ADMIN_TOKEN:-admin-dev-token}
MSG
if $observability; then
  cat <<MSG
  traces        open http://localhost:$port/web/trace.html?id=<trace_id>   (a problem answer's trace_id,
                or the latest traces there; every replica, the gateway and the mailer send their
                spans to $SHOP_OTLP_ENDPOINT; Jaeger's query API is http://localhost:${SHOP_JAEGER_PORT:-16686}/api/traces)
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
