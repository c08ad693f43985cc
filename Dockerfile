# Multi-stage build of the shop binary. Base images are build arguments, so a
# machine without registry access can build on local stand-ins:
#   docker build --build-arg GO_IMAGE=... --build-arg RUNTIME_IMAGE=... .
# No BuildKit-only syntax: the legacy builder (DOCKER_BUILDKIT=0) builds it
# too. A builder that cannot reach the Go module proxy builds from a context
# with the modules vendored and GOFLAGS=-mod=vendor (deploy/images/shop-image.sh,
# which builds the binary on the host instead when the host has Go, and
# copies it into the runtime stage below: deploy/images/shop/Dockerfile).
# .dockerignore lets in only what the binary is built from.
ARG GO_IMAGE=golang:1.26-alpine
ARG RUNTIME_IMAGE=alpine:3.22

FROM ${GO_IMAGE} AS build
# The legacy builder keeps this stage as an untagged image:
# deploy/images/shop-image.sh removes it by this label.
LABEL org.shop-example.image=shop
WORKDIR /src
ENV CGO_ENABLED=0 GOTOOLCHAIN=local
ARG GOFLAGS=
COPY go.mod go.sum ./
RUN case " $GOFLAGS " in *" -mod=vendor "*) ;; *) go mod download ;; esac
COPY . .
RUN go build -trimpath -ldflags='-s -w' -o /out/shop ./cmd/shop \
 && mkdir -p /out/data

# The runtime image holds the static binary and an empty /var/lib/shop owned
# by the service's user, so a volume mounted there (the gateway's journal)
# starts out writable. It needs no shell, wget or curl: the healthchecks run
# `shop health <url>`.
FROM ${RUNTIME_IMAGE}
COPY --from=build /out/shop /usr/local/bin/shop
COPY --from=build --chown=10001:10001 /out/data /var/lib/shop
USER 10001:10001
WORKDIR /var/lib/shop
EXPOSE 8080 8081 9090
ENTRYPOINT ["/usr/local/bin/shop"]
CMD ["serve"]
