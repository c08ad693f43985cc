#!/usr/bin/env bash
# make clean-images: gives back the disk that make up's images take, once
# the stacks that use them are down (make down).
#
#   deploy/images/clean.sh [--dry-run]
#
# Removes the shop image (SHOP_IMAGE, default shop:local) and the untagged
# ones its builds left (label org.shop-example.image=shop), the stand-ins of deploy/images/build.sh (label org.shop-example.recipe, named
# $SHOP_IMAGES_PREFIX/…, default shop-local) and their cache of root
# filesystems and Jaeger's binary ($SHOP_IMAGES_CACHE, default
# /var/cache/shop-images), and bin/image; then the lines of .env that name
# the stand-ins, and .images/env, so the next make up builds them again.
# An image a container still uses (running or stopped) is left, and named.
# Images of other names, and Go's own caches, are left alone.
set -euo pipefail
cd "$(dirname "$0")/../.."

dry_run=false
case "${1:-}" in
  --dry-run) dry_run=true ;;
  "") ;;
  *) echo "usage: $0 [--dry-run]" >&2; exit 2 ;;
esac
prefix=${SHOP_IMAGES_PREFIX:-shop-local}
cache=${SHOP_IMAGES_CACHE:-/var/cache/shop-images}
tag=${SHOP_IMAGE:-shop:local}
say() { printf '[clean-images] %s\n' "$*" >&2; }

# The images: the shop's, and the stand-ins under the prefix.
images=$( {
  id=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
  [ -z "$id" ] || echo "$id $tag"
  docker image ls --filter "label=org.shop-example.recipe" --format '{{.ID}} {{.Repository}}:{{.Tag}}' |
    awk -v p="$prefix/" 'index($2, p) == 1'
  docker image ls --format '{{.ID}} {{.Repository}}:{{.Tag}}' "$prefix/rootfs"
} | sort -u -k2,2)
removed=0
kept=()
while read -r id name; do
  [ -n "$id" ] || continue
  if $dry_run; then
    say "would remove $name"
    continue
  fi
  # By name, so an image also tagged otherwise keeps its other names; an
  # untagged one by id.
  ref=$name
  [ "$name" != "<none>:<none>" ] || ref=$id
  if docker rmi "$ref" >/dev/null 2>&1; then
    removed=$((removed + 1))
  else
    kept+=("$name")
  fi
done <<<"$images"
if [ ${#kept[@]} -gt 0 ]; then
  say "kept, a container uses them (make down first): ${kept[*]}"
fi

if $dry_run; then
  say "would remove $cache, bin/image, .images/env and the stand-in lines of .env"
  exit 0
fi
say "removed $removed images"
if [ -d "$cache" ]; then
  say "removing $cache ($(du -sh "$cache" 2>/dev/null | cut -f1))"
  # A root filesystem may still have /proc mounted after an interrupted
  # build.
  for m in "$cache"/rootfs/*/proc "$cache"/*/proc; do
    mountpoint -q "$m" 2>/dev/null && umount "$m"
  done
  rm -rf "$cache"
fi
rm -rf bin/image .images/env
if [ -f .env ]; then
  keys=POSTGRES_IMAGE\|REDIS_IMAGE\|NGINX_IMAGE\|PROMETHEUS_IMAGE\|GO_IMAGE\|RUNTIME_IMAGE\|JAEGER_IMAGE\|SHOP_TEST_POSTGRES_IMAGE\|SHOP_TEST_REDIS_IMAGE\|TESTCONTAINERS_RYUK_DISABLED\|DOCKER_BUILDKIT\|TESTCONTAINERS_HOST_OVERRIDE
  grep -Ev "^(# shop-local images|($keys)=)" .env >.env.tmp || true
  if [ -s .env.tmp ]; then mv .env.tmp .env; else rm -f .env.tmp .env; fi
fi
docker image prune -f --filter "label=org.shop-example.image=shop" >/dev/null 2>&1 || true
say "done; docker system df:"
docker system df >&2
