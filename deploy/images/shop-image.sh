#!/usr/bin/env bash
# Builds the shop image from the Dockerfile without network access in the
# build: the context is the working tree (less what .dockerignore leaves
# out) plus the modules vendored on the host (`go mod vendor`), and the
# build runs with GOFLAGS=-mod=vendor. The working tree itself gets no
# vendor/ directory.
#
#   deploy/images/shop-image.sh
#
# Variables: SHOP_IMAGE (the tag, default shop:local), GO_IMAGE and
# RUNTIME_IMAGE (the bases, default the official images; .images/env points
# them at the stand-ins of deploy/images/build.sh).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
tag=${SHOP_IMAGE:-shop:local}
go_image=${GO_IMAGE:-golang:1.26-alpine}
runtime_image=${RUNTIME_IMAGE:-alpine:3.22}
export PATH="$PATH:/usr/local/go/bin"

ctx=$(mktemp -d /tmp/shop-context.XXXXXX)
trap 'rm -rf "$ctx"' EXIT

tar -C "$repo" --exclude-from="$repo/.dockerignore" --exclude=./vendor -cf - . | tar -C "$ctx" -xf -
(cd "$ctx" && go mod vendor)

echo "[shop-image] building $tag on $go_image and $runtime_image" >&2
start=$SECONDS
# The builder's steps are shown as they start (the Go build is the long
# one); all of its output is shown if it fails.
log=$(mktemp /tmp/shop-image-build.XXXXXX)
trap 'rm -rf "$ctx" "$log"' EXIT
# A step may take minutes (the Go build): say every 20 s that it goes on.
(
  while sleep 20; do echo "[shop-image]   ... $((SECONDS - start))s" >&2; done
) &
ticker=$!
trap 'kill "$ticker" 2>/dev/null || true; rm -rf "$ctx" "$log"' EXIT
set +e
DOCKER_BUILDKIT=0 docker build \
  --build-arg "GO_IMAGE=$go_image" \
  --build-arg "RUNTIME_IMAGE=$runtime_image" \
  --build-arg GOFLAGS=-mod=vendor \
  -t "$tag" "$ctx" 2>&1 | tee "$log" | sed -un 's/^Step \(.\{1,80\}\).*/[shop-image]   step \1/p' >&2
rc=${PIPESTATUS[0]}
set -e
kill "$ticker" 2>/dev/null || true
if [ "$rc" -ne 0 ]; then
  cat "$log" >&2
  exit 1
fi
echo "[shop-image] built in $((SECONDS - start))s" >&2
docker image ls --format '[shop-image] {{.Repository}}:{{.Tag}}  {{.Size}}' "$tag" >&2
