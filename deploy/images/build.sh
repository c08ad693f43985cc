#!/usr/bin/env bash
# Builds local stand-ins for every image that docker-compose.yml, the
# Dockerfile and the tests need, from Debian bookworm packages, for a machine
# whose Docker engine cannot pull from any registry (docs/CONTAINERS.md,
# "No registry access?").
#
#   deploy/images/build.sh [--force] [--print-env] [--dry-run] [image...]
#
# images: debian golang postgres redis nginx prometheus (the default, which
# CI builds) and jaeger, built only when named (`build.sh jaeger`, or
# `make up-observability` when it cannot pull Jaeger): it is compiled from
# its Go module, 3 to 8 minutes on 2 cores (below). --dry-run says what
# would be built and the variables that would be written, and does nothing.
#
# Each image is a Debian root filesystem (mmdebstrap, then apt-get install
# in a chroot), imported with `docker import`, then finished by the small
# Dockerfile in deploy/images/<image>/ (environment, entrypoint, STOPSIGNAL:
# an imported image has none of them), built by the legacy builder. Root
# filesystems are cached under $SHOP_IMAGES_CACHE, so a rebuild that only
# changed a Dockerfile or an entrypoint takes seconds; an image whose recipe
# did not change is left alone, so running the script again is cheap.
#
# At the end it writes .images/env (KEY=value lines: for `set -a; . .images/env`
# and for `docker compose --env-file .images/env`) pointing the compose,
# Dockerfile and testcontainers image variables at the stand-ins.
#
# The images are built side by side once the base is there, each with its
# own log ($SHOP_IMAGES_CACHE/build-<image>.log).
#
# Needs root (mmdebstrap, chroot), mmdebstrap (installed from Debian's
# packages when missing), Docker, and the Go 1.26
# toolchain on the host (copied into the golang image) or network access to
# the Go module proxy (which serves toolchains as golang.org/toolchain);
# jaeger needs the module proxy for Jaeger's modules.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${SHOP_IMAGES_CACHE:-/var/cache/shop-images}
prefix=${SHOP_IMAGES_PREFIX:-shop-local}
mirror=${SHOP_IMAGES_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
go_minor=1.26

# Jaeger is no Debian package: its binary is built from its Go module.
# The module's releases are tagged in pairs, v1.x for the old components
# and v2.y for Jaeger v2 (its CHANGELOG: "v1.74.0 / v2.11.0"); the binary
# cmd/jaeger of v1.75.0 is Jaeger 2.12.0.
jaeger_module=github.com/jaegertracing/jaeger
jaeger_version=v1.75.0
jaeger_release=2.12.0

force=false
print_env=false
dry_run=false
wanted=()
for a in "$@"; do
  case "$a" in
    --force) force=true ;;
    --print-env) print_env=true ;;
    --dry-run) dry_run=true ;;
    debian|golang|postgres|redis|nginx|prometheus|jaeger) wanted+=("$a") ;;
    *) echo "usage: $0 [--force] [--print-env] [--dry-run] [debian|golang|postgres|redis|nginx|prometheus|jaeger ...]" >&2; exit 2 ;;
  esac
done
[ ${#wanted[@]} -gt 0 ] || wanted=(debian golang postgres redis nginx prometheus)
# The jaeger image is the debian one with the binary in it.
if [[ " ${wanted[*]} " == *" jaeger "* && " ${wanted[*]} " != *" debian "* ]]; then
  wanted=(debian "${wanted[@]}")
fi

# Image names. The tags say what is inside: Debian bookworm has
# PostgreSQL 15, Redis 7.0, nginx 1.22 and Prometheus 2.42.
declare -A image=(
  [debian]="$prefix/debian:$suite"
  [golang]="$prefix/golang:$go_minor"
  [postgres]="$prefix/postgres:15"
  [redis]="$prefix/redis:7"
  [nginx]="$prefix/nginx:1"
  [prometheus]="$prefix/prometheus:2"
  [jaeger]="$prefix/jaeger:$jaeger_release"
)
# Packages installed on top of the base (minbase + ca-certificates, tzdata).
declare -A packages=(
  [debian]=""
  [golang]=""
  [postgres]="postgresql-15"
  [redis]="redis-server"
  [nginx]="nginx"
  [prometheus]="prometheus"
)

# env_lines prints the variables, one KEY=value a line. JAEGER_IMAGE is
# among them once its stand-in is built (or being built): a run that builds
# only the others keeps it.
env_lines() {
  cat <<ENV
POSTGRES_IMAGE=${image[postgres]}
REDIS_IMAGE=${image[redis]}
NGINX_IMAGE=${image[nginx]}
PROMETHEUS_IMAGE=${image[prometheus]}
GO_IMAGE=${image[golang]}
RUNTIME_IMAGE=${image[debian]}
SHOP_TEST_POSTGRES_IMAGE=${image[postgres]}
SHOP_TEST_REDIS_IMAGE=${image[redis]}
TESTCONTAINERS_RYUK_DISABLED=true
DOCKER_BUILDKIT=0
ENV
  if [[ " ${wanted[*]} " == *" jaeger "* ]] || docker image inspect "${image[jaeger]}" >/dev/null 2>&1; then
    echo "JAEGER_IMAGE=${image[jaeger]}"
  fi
  # In a container (/.dockerenv) testcontainers reaches published ports via
  # the bridge network's gateway, or else the default route's; when the
  # Docker engine runs in this same network namespace (docker0 is here),
  # they are on localhost.
  if [ -f /.dockerenv ] && [ -e /sys/class/net/docker0 ]; then
    echo "TESTCONTAINERS_HOST_OVERRIDE=localhost"
  fi
}

write_env() {
  mkdir -p "$repo/.images"
  env_lines >"$repo/.images/env"
  write_dotenv
}

# write_dotenv puts the same variables into the repository's .env (ignored
# by git), which `docker compose` and `docker-compose` read by themselves
# and the Makefile includes: a new shell does not go back to pulling the
# official images. Lines of .env that set other variables are kept.
write_dotenv() {
  local dotenv="$repo/.env" keys kept=""
  keys=$(cut -d= -f1 "$repo/.images/env" | paste -sd'|')
  if [ -f "$dotenv" ]; then
    kept=$(grep -Ev "^(# shop-local images|($keys)=)" "$dotenv" || true)
  fi
  {
    [ -z "$kept" ] || printf '%s\n' "$kept"
    echo "# shop-local images (deploy/images/build.sh); delete these lines to use the official images"
    cat "$repo/.images/env"
  } >"$dotenv.tmp"
  mv "$dotenv.tmp" "$dotenv"
}

if $dry_run; then
  echo "would build: ${wanted[*]}"
  echo "would write .images/env and .env:"
  env_lines | sed 's/^/  /'
  exit 0
fi

if $print_env; then
  write_env
  sed 's/^/export /' "$repo/.images/env"
  exit 0
fi

log() { printf '[images] %s\n' "$*" >&2; }

# busy LOG COMMAND... runs a command and, while it runs, says every 15 s
# (on the script's own stderr, fd 3, whatever the command's output is
# redirected to) that it still does and the last line of LOG, so a long
# step is not silent.
exec 3>&2
busy() {
  local file=$1
  shift
  "$@" &
  local pid=$! start=$SECONDS rc=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if kill -0 "$pid" 2>/dev/null && (((SECONDS - start) % 15 == 0)); then
      printf '[images]   ... %ds: %s\n' "$((SECONDS - start))" \
        "$(tail -n 1 "$file" 2>/dev/null | tr -cd '[:print:]' | cut -c1-90)" >&3
    fi
  done
  wait "$pid" || rc=$?
  return $rc
}

[ "$(id -u)" = 0 ] || { log "run as root (mmdebstrap and chroot need it)"; exit 1; }
# mmdebstrap is the one tool a bare machine of this kind lacks: installed
# from Debian's packages, as root can (make up needs no command first).
# It makes the base in a fifth of debootstrap's time: apt downloads the
# packages in parallel, and the updates come with them.
if ! command -v mmdebstrap >/dev/null; then
  if command -v apt-get >/dev/null; then
    log "mmdebstrap is missing: installing it (apt-get install mmdebstrap)"
    apt_log=$(mktemp /tmp/shop-images-apt.XXXXXX)
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=300 mmdebstrap debian-archive-keyring; } >"$apt_log" 2>&1 ||
      { cat "$apt_log" >&2; log "could not install mmdebstrap"; exit 1; }
    rm -f "$apt_log"
  else
    log "mmdebstrap is missing: apt-get install mmdebstrap"
    exit 1
  fi
fi
export DOCKER_BUILDKIT=0

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9 # one build at a time per cache

# hash prints a short digest of its arguments and of the files named with @.
hash() {
  local a
  for a in "$@"; do
    case "$a" in
      @*) cat "${a#@}" ;;
      *) printf '%s\n' "$a" ;;
    esac
  done | sha256sum | cut -c1-16
}

# chroot_run runs a command in a root filesystem with /proc mounted. Its
# output goes to $build_log (one per image), and is shown if it fails.
build_log=$cache/build.log
chroot_run() {
  local root=$1
  shift
  mount -t proc proc "$root/proc"
  mounted="$root/proc"
  local rc=0
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@" >>"$build_log" 2>&1 || rc=$?
  umount "$root/proc"
  mounted=
  if [ $rc -ne 0 ]; then
    log "failed in $root: $*"
    tail -n 30 "$build_log" >&2
  fi
  return $rc
}

# An interrupted run leaves no /proc mounted, and a half-built tree is
# removed only once nothing is mounted in it.
mounted=
scratch=
cleanup() {
  [ -z "$mounted" ] || umount "$mounted" 2>/dev/null || true
  [ -z "$scratch" ] || rm -rf "$scratch"
}
trap cleanup EXIT
remove_tree() {
  if mountpoint -q "$1/proc" 2>/dev/null; then umount "$1/proc"; fi
  rm -rf "$1"
}

# only_std_fds runs a command with no file descriptor open but 0, 1 and 2:
# mmdebstrap hands apt a descriptor for a `cat >&N` that dash runs, and
# dash knows only single digits, so with this script's locks and pipes
# open it got 11, and failed ("Bad fd number").
only_std_fds() {
  (
    local fd
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null
    done
    exec "$@"
  )
}

# base: a minimal bookworm with its updates and security updates, kept with
# its apt lists so that the images can install packages from it, without
# documentation or translations (dpkg's path-exclude, which the images'
# packages obey too), and with dpkg's force-unsafe-io: it syncs nothing
# while it unpacks, which a throwaway tree does not need and which costs
# minutes on a busy disk.
base_recipe=$(hash "$suite" "$mirror" "minbase" "ca-certificates,tzdata" "mmdebstrap" "unsafe-io" "v2")
# The images, built side by side, make it once: the first takes the lock.
build_base() {
  exec 8>"$cache/.base-lock"
  flock 8
  if [ -f "$cache/base/.recipe" ] && [ "$(cat "$cache/base/.recipe")" = "$base_recipe" ]; then
    flock -u 8
    return
  fi
  if [ "$(cat "$cache/.base-failed" 2>/dev/null)" = "$$" ]; then
    exit 1 # this run's first try failed, and said why
  fi
  log "mmdebstrap $suite into $cache/base (under a minute)"
  remove_tree "$cache/base.tmp"
  busy "$cache/mmdebstrap.log" only_std_fds mmdebstrap --variant=minbase --include=ca-certificates,tzdata \
    --skip=cleanup/apt/lists --dpkgopt=force-unsafe-io --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$suite" "$cache/base.tmp" "deb $mirror $suite main" "deb $mirror $suite-updates main" \
    "deb ${mirror%/debian}/debian-security $suite-security main" \
    >"$cache/mmdebstrap.log" 2>&1 || {
    tail -n 20 "$cache/mmdebstrap.log" >&2
    echo "$$" >"$cache/.base-failed"
    exit 1
  }
  # Services must not start in the chroot while their packages install.
  printf '#!/bin/sh\nexit 101\n' >"$cache/base.tmp/usr/sbin/policy-rc.d"
  chmod 755 "$cache/base.tmp/usr/sbin/policy-rc.d"
  echo "$base_recipe" >"$cache/base.tmp/.recipe"
  rm -rf "$cache/base"
  mv "$cache/base.tmp" "$cache/base"
  flock -u 8
}

# go_root prints a Go $go_minor GOROOT: the host's, or one downloaded from the
# module proxy (golang.org/toolchain) into the cache.
go_root() {
  local host
  host=$(PATH="/usr/local/go/bin:$PATH" go env GOROOT 2>/dev/null || true)
  if [ -n "$host" ] && head -n 1 "$host/VERSION" 2>/dev/null | grep -q "^go$go_minor\(\.\|$\)"; then
    echo "$host"
    return
  fi
  local version=${SHOP_IMAGES_GO_VERSION:-${go_minor}.0}
  local dir="$cache/toolchain/go$version"
  if [ ! -x "$dir/bin/go" ]; then
    local proxy=${GOPROXY:-https://proxy.golang.org}
    proxy=${proxy%%,*}
    local zip="$cache/toolchain/go$version.zip"
    log "no Go $go_minor on the host: fetching go$version from $proxy"
    mkdir -p "$cache/toolchain"
    curl -fsSL -o "$zip" "$proxy/golang.org/toolchain/@v/v0.0.1-go$version.linux-amd64.zip"
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    unzip -q "$zip" -d "$dir.tmp"
    mv "$dir.tmp/golang.org/toolchain@v0.0.1-go$version.linux-amd64" "$dir"
    rm -rf "$dir.tmp" "$zip"
  fi
  echo "$dir"
}

# prepare_<image> adjusts the root filesystem after its packages are
# installed, as the official image's Dockerfile does.
prepare_debian() { :; }

prepare_golang() {
  local root=$1 goroot
  goroot=$(go_root)
  log "copying $(head -n 1 "$goroot/VERSION") from $goroot"
  mkdir -p "$root/usr/local" "$root/go/bin" "$root/go/src"
  cp -a "$goroot" "$root/usr/local/go"
  chmod -R a+rwX "$root/go"
}

prepare_postgres() {
  local root=$1
  # As the official image: every server listens on all interfaces.
  sed -ri "s!^#?(listen_addresses)\s*=\s*\S+.*!\1 = '*'!" \
    "$root/usr/share/postgresql/15/postgresql.conf.sample"
  grep -q "^listen_addresses = '\*'" "$root/usr/share/postgresql/15/postgresql.conf.sample"
  mkdir -p "$root/docker-entrypoint-initdb.d" "$root/var/run/postgresql" "$root/var/lib/postgresql/data"
  chroot "$root" chown -R postgres:postgres /var/run/postgresql /var/lib/postgresql
  chmod 3777 "$root/var/run/postgresql"
}

prepare_redis() {
  local root=$1
  mkdir -p "$root/data"
  chroot "$root" chown redis:redis /data
}

prepare_nginx() {
  local root=$1
  # As the official image: logs go to the container's output.
  ln -sf /dev/stdout "$root/var/log/nginx/access.log"
  ln -sf /dev/stderr "$root/var/log/nginx/error.log"
  rm -f "$root/etc/nginx/sites-enabled/default"
}

prepare_prometheus() {
  local root=$1
  # The package made the prometheus user; compose mounts the
  # configuration over /etc/prometheus.
  mkdir -p "$root/prometheus"
  chroot "$root" chown prometheus:prometheus /prometheus
}

# build_rootfs makes $cache/rootfs/<image>: the base plus the image's
# packages, cleaned, unless it is there from the same recipe.
build_rootfs() {
  local name=$1 recipe=$2
  local dir="$cache/rootfs/$name"
  if [ -f "$dir/.recipe" ] && [ "$(cat "$dir/.recipe")" = "$recipe" ] && ! $force; then
    return
  fi
  log "$name: root filesystem (packages: ${packages[$name]:-none})"
  remove_tree "$dir.tmp"
  mkdir -p "$cache/rootfs"
  cp -a "$cache/base" "$dir.tmp"
  rm -f "$dir.tmp/.recipe"
  if [ "$name" = postgres ]; then
    # Only the entrypoint creates a cluster, in $PGDATA.
    mkdir -p "$dir.tmp/etc/postgresql-common/createcluster.d"
    echo 'create_main_cluster = false' >"$dir.tmp/etc/postgresql-common/createcluster.d/docker.conf"
  fi
  if [ -n "${packages[$name]}" ]; then
    # shellcheck disable=SC2086 # a list of package names
    busy "$build_log" chroot_run "$dir.tmp" apt-get install -y -qq --no-install-recommends ${packages[$name]}
  fi
  "prepare_$name" "$dir.tmp"
  chroot_run "$dir.tmp" apt-get clean
  rm -rf "$dir.tmp"/var/lib/apt/lists/* "$dir.tmp"/var/log/*.log "$dir.tmp"/var/log/apt/* \
    "$dir.tmp"/var/cache/debconf/*-old "$dir.tmp"/tmp/* "$dir.tmp/etc/machine-id"
  echo "$recipe" >"$dir.tmp/.recipe"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
}

# build_image imports the root filesystem and finishes it with the image's
# Dockerfile, unless the image is there from the same recipe.
build_image() {
  local name=$1
  local rootfs_recipe recipe f files=()
  # The recipe of a root filesystem is the code that makes it.
  rootfs_recipe=$(hash "$base_recipe" "$name" "${packages[$name]}" \
    "$(declare -f build_rootfs "prepare_$name" chroot_run)")
  if [ "$name" = golang ]; then
    rootfs_recipe=$(hash "$rootfs_recipe" "@$(go_root)/VERSION")
  fi
  for f in "$here/$name"/*; do files+=("@$f"); done
  recipe=$(hash "$rootfs_recipe" "${image[$name]}" "${files[@]}")
  local have
  have=$(docker image inspect -f '{{index .Config.Labels "org.shop-example.recipe"}}' "${image[$name]}" 2>/dev/null || true)
  if [ "$have" = "$recipe" ] && ! $force; then
    log "$name: ${image[$name]} is up to date"
    return
  fi
  build_base
  build_rootfs "$name" "$rootfs_recipe"
  local imported="$prefix/rootfs:$name"
  log "$name: docker import as $imported"
  tar -C "$cache/rootfs/$name" --numeric-owner --exclude=./.recipe -c . | docker import - "$imported" >/dev/null
  log "$name: docker build ${image[$name]}"
  local out
  if ! out=$(docker build --build-arg "ROOTFS=$imported" --label "org.shop-example.recipe=$recipe" \
    -t "${image[$name]}" "$here/$name" 2>&1); then
    printf '%s\n' "$out" >&2
    exit 1
  fi
  # The imported filesystem lives on as the image's first layer; its own
  # name would only list it twice.
  docker rmi "$imported" >/dev/null 2>&1 || true
}

# jaeger_bin is where build_jaeger_binary leaves Jaeger's binary.
jaeger_bin="$cache/jaeger/$jaeger_version/jaeger"

# build_jaeger_binary builds $jaeger_module/cmd/jaeger at $jaeger_version
# unless it is cached: in a throwaway module outside the repository (the
# project's go.mod never names Jaeger), with the Go toolchain the golang
# image gets, static (CGO_ENABLED=0) and versioned as the official build
# is. 3 to 8 minutes on 2 cores (6 minutes of CPU), most of it compiling;
# Go's own caches (GOMODCACHE, GOCACHE) keep the modules and the compiled
# packages.
build_jaeger_binary() {
  if [ -x "$jaeger_bin" ] && ! $force; then
    return
  fi
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/shop-jaeger.XXXXXX")
  log "jaeger: go build $jaeger_module/cmd/jaeger@$jaeger_version (Jaeger $jaeger_release; 3 to 8 minutes on 2 cores)"
  if ! busy "$cache/build.log" compile_jaeger "$scratch" "$(go_root)/bin/go" >>"$cache/build.log" 2>&1; then
    log "jaeger: the build failed"
    tail -n 30 "$cache/build.log" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$jaeger_bin")"
  mv "$scratch/jaeger" "$jaeger_bin"
  rm -rf "$scratch"
  scratch=
}

# compile_jaeger DIR GO makes DIR a module that requires Jaeger's and
# builds the binary there as DIR/jaeger (in busy's subshell: the cd and
# the variables stay there).
compile_jaeger() {
  local go=$2
  cd "$1" &&
    export GOWORK=off GOFLAGS= GOTOOLCHAIN=local CGO_ENABLED=0 &&
    "$go" mod init shop-local/jaeger-build &&
    "$go" get "$jaeger_module/cmd/jaeger@$jaeger_version" &&
    "$go" build -trimpath -ldflags "-X $jaeger_module/internal/version.latestVersion=v$jaeger_release" \
      -o jaeger "$jaeger_module/cmd/jaeger"
}

# build_jaeger puts the binary on the debian stand-in with the Dockerfile
# of deploy/images/jaeger, unless the image is there from the same recipe.
build_jaeger() {
  local base recipe have
  base=$(docker image inspect -f '{{.Id}}' "${image[debian]}")
  recipe=$(hash "$base" "$jaeger_module@$jaeger_version" "${image[jaeger]}" \
    "$(declare -f build_jaeger_binary compile_jaeger build_jaeger)" "@$here/jaeger/Dockerfile")
  have=$(docker image inspect -f '{{index .Config.Labels "org.shop-example.recipe"}}' "${image[jaeger]}" 2>/dev/null || true)
  if [ "$have" = "$recipe" ] && ! $force; then
    log "jaeger: ${image[jaeger]} is up to date"
    return
  fi
  build_jaeger_binary
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/shop-jaeger-image.XXXXXX")
  cp "$here/jaeger/Dockerfile" "$scratch/"
  ln "$jaeger_bin" "$scratch/jaeger" 2>/dev/null || cp "$jaeger_bin" "$scratch/jaeger"
  log "jaeger: docker build ${image[jaeger]}"
  local out
  if ! out=$(docker build --build-arg "BASE=${image[debian]}" --label "org.shop-example.recipe=$recipe" \
    -t "${image[jaeger]}" "$scratch" 2>&1); then
    printf '%s\n' "$out" >&2
    exit 1
  fi
  rm -rf "$scratch"
  scratch=
}

# The Debian images side by side, each in a subshell with its own log;
# then Jaeger's, which is built on the debian one.
pids=()
names=()
for name in "${wanted[@]}"; do
  [ "$name" != jaeger ] || continue
  (
    trap cleanup EXIT
    start=$SECONDS
    build_log=$cache/build-$name.log
    : >"$build_log"
    build_image "$name"
    log "$name: done in $((SECONDS - start))s"
  ) &
  pids+=($!)
  names+=("$name")
done
failed=()
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed+=("${names[$i]}")
done
if [ ${#failed[@]} -gt 0 ]; then
  log "not built: ${failed[*]} (their logs: $cache/build-<image>.log)"
  exit 1
fi
if [[ " ${wanted[*]} " == *" jaeger "* ]]; then
  start=$SECONDS
  build_jaeger
  log "jaeger: done in $((SECONDS - start))s"
fi
docker image prune -f --filter "label=org.shop-example.recipe" >/dev/null || true

write_env
log "images:"
for name in "${wanted[@]}"; do
  docker image ls --format '  {{.Repository}}:{{.Tag}}  {{.Size}}' "${image[$name]}" >&2
done
log "variables written to .env (docker compose, docker-compose and make read it by themselves)"
log "and to .images/env, for other shells: set -a; . .images/env; set +a"
