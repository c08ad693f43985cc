#!/usr/bin/env bash
# Builds the shop image without network access in the build, in one of two
# ways:
#
#   - with Go on the host (the default when `go` is found): the binary is
#     built here, with the host's Go build cache, and copied into the
#     runtime image by deploy/images/shop/Dockerfile. The context is the
#     binary alone, so a rebuild with nothing changed takes seconds and
#     makes no new image;
#   - without it (or SHOP_IMAGE_BUILD=docker): the repository's Dockerfile,
#     from a context of what .dockerignore lets in plus the modules
#     vendored on the host (`go mod vendor`, or the builder's own proxy
#     when the host has no Go), built with GOFLAGS=-mod=vendor.
#
#   deploy/images/shop-image.sh [--binary]
#
# --binary builds the binary only (bin/image/shop), as deploy/up.sh does
# in the background while the base images are made; a second run finds it
# up to date. Either way the build leaves no dangling image: a replaced
# shop image and the Dockerfile's build stage are removed by their label.
#
# Variables: SHOP_IMAGE (the tag, default shop:local), GO_IMAGE and
# RUNTIME_IMAGE (the bases, default the official images; .images/env points
# them at the stand-ins of deploy/images/build.sh), SHOP_IMAGE_BUILD (host
# or docker; default host when Go is found).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
tag=${SHOP_IMAGE:-shop:local}
go_image=${GO_IMAGE:-golang:1.26-alpine}
runtime_image=${RUNTIME_IMAGE:-alpine:3.22}
label=org.shop-example.image=shop
export PATH="$PATH:/usr/local/go/bin"
say() { echo "[shop-image] $*" >&2; }

binary_only=false
case "${1:-}" in
  --binary) binary_only=true ;;
  "") ;;
  *) echo "usage: $0 [--binary]" >&2; exit 2 ;;
esac

mode=${SHOP_IMAGE_BUILD:-}
if [ -z "$mode" ]; then
  if command -v go >/dev/null; then mode=host; else mode=docker; fi
fi

# build_binary compiles cmd/shop for the engine's platform into
# bin/image/shop: static, without paths or VCS stamps, so that the same
# sources give the same bytes and the image's COPY stays cached.
ctx=$repo/bin/image
go_build=(go build -trimpath -buildvcs=false -ldflags='-s -w' -o "$ctx/shop" ./cmd/shop)
build_env() {
  local arch
  arch=$(docker version -f '{{.Server.Arch}}' 2>/dev/null || go env GOARCH)
  mkdir -p "$ctx/data"
  export CGO_ENABLED=0 GOOS=linux GOARCH=$arch
}
build_binary() { (build_env && "${go_build[@]}"); }

if $binary_only; then
  [ "$mode" = host ] || { say "no Go on the host: nothing to build before the image"; exit 0; }
  # The script becomes the build, so that make up, which runs it in the
  # background, can stop it by its process id.
  build_env
  exec "${go_build[@]}"
fi

# prune removes the dangling images this script's builds leave: the
# previous shop image once the tag moves, and the build stage.
prune() { docker image prune -f --filter "label=$label" >/dev/null || true; }

start=$SECONDS
if [ "$mode" = host ]; then
  say "building cmd/shop with $(go env GOVERSION) on the host (Go build cache: $(go env GOCACHE))"
  build_binary
  say "binary built in $((SECONDS - start))s; building $tag on $runtime_image"
  cp deploy/images/shop/Dockerfile "$ctx/Dockerfile"
  out=$(DOCKER_BUILDKIT=0 docker build --build-arg "RUNTIME_IMAGE=$runtime_image" --label "$label" \
    -t "$tag" "$ctx" 2>&1) || { printf '%s\n' "$out" >&2; exit 1; }
  prune
  say "built in $((SECONDS - start))s"
  docker image ls --format '[shop-image] {{.Repository}}:{{.Tag}}  {{.Size}}' "$tag" >&2
  exit 0
fi

# The Dockerfile's way: a context of the files .dockerignore lets in (the
# builder applies it again), with the modules vendored beside them.
dctx=$(mktemp -d /tmp/shop-context.XXXXXX)
log=$(mktemp /tmp/shop-image-build.XXXXXX)
ticker=
trap '[ -z "$ticker" ] || kill "$ticker" 2>/dev/null || true; rm -rf "$dctx" "$log"' EXIT
tar -cf - go.mod go.sum cmd internal harness web migrations docs/docs.go docs/openapi.yaml \
  Dockerfile .dockerignore | tar -C "$dctx" -xf -
vendor_arg=
if command -v go >/dev/null && (cd "$dctx" && go mod vendor); then
  vendor_arg=GOFLAGS=-mod=vendor
fi

say "building $tag with the Dockerfile on $go_image and $runtime_image${vendor_arg:+ (modules vendored)}"
# A step may take minutes (the Go build): say every 20 s that it goes on.
(
  while sleep 20; do echo "[shop-image]   ... $((SECONDS - start))s" >&2; done
) &
ticker=$!
set +e
DOCKER_BUILDKIT=0 docker build \
  --build-arg "GO_IMAGE=$go_image" \
  --build-arg "RUNTIME_IMAGE=$runtime_image" \
  ${vendor_arg:+--build-arg "$vendor_arg"} \
  --label "$label" \
  -t "$tag" "$dctx" 2>&1 | tee "$log" | sed -un 's/^Step \(.\{1,80\}\).*/[shop-image]   step \1/p' >&2
rc=${PIPESTATUS[0]}
set -e
kill "$ticker" 2>/dev/null || true
ticker=
if [ "$rc" -ne 0 ]; then
  cat "$log" >&2
  prune
  exit 1
fi
prune
say "built in $((SECONDS - start))s"
docker image ls --format '[shop-image] {{.Repository}}:{{.Tag}}  {{.Size}}' "$tag" >&2
