# Multi-stage build of the shop binary. Base images are build arguments, so a
# machine without registry access can build on local stand-ins:
#   docker build --build-arg GO_IMAGE=... --build-arg RUNTIME_IMAGE=... .
# No BuildKit-only syntax: the legacy builder builds it too.
ARG GO_IMAGE=golang:1.26-alpine
ARG RUNTIME_IMAGE=alpine:3.22

FROM ${GO_IMAGE} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOTOOLCHAIN=local
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go build -trimpath -ldflags='-s -w' -o /out/shop ./cmd/shop

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/shop /usr/local/bin/shop
USER 10001:10001
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/shop"]
CMD ["serve"]
