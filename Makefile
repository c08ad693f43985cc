# shop — common tasks. `make test` is the command CI runs.

GO      ?= go
BIN     ?= bin/shop
PKGS    ?= ./...
FUZZTIME ?= 30s

.PHONY: linearizability ablation all build test test-short run migrate seed lint fmt fuzz bench images image e2e clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/shop

# Every test, with the race detector, against real PostgreSQL and Redis:
# testcontainers starts them, unless SHOP_TEST_POSTGRES_URL and
# SHOP_TEST_REDIS_ADDRS point at running servers.
test:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

# The ablation matrices, rewriting docs/ABLATION.md with what they saw.
ablation:
	SHOP_UPDATE_DOCS=1 $(GO) test -race -count=1 -run '^TestAblation_' ./internal/app/

# The seat map's linearizability check at its larger size (64 clients,
# thousands of operations); `make test` runs it small.
linearizability:
	SHOP_SEATS_LINEARIZABILITY_LARGE=1 $(GO) test -race -count=1 -run '^TestSeats_Linearizable' ./internal/app/

# Pure rule tests only: no database, no Redis.
test-short:
	$(GO) test -short -count=1 $(PKGS)

run: build
	SHOP_MIGRATE=true ./$(BIN) serve

migrate: build
	./$(BIN) migrate up

seed: build
	./$(BIN) seed

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet $(PKGS)
	$(GO) vet -tags e2e ./e2e/

fmt:
	gofmt -w $$(git ls-files '*.go')

# Run the request-body fuzzers for a while (their seed corpora run in `make test`).
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeCreate -fuzztime $(FUZZTIME) ./internal/orders/
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./internal/platform/httpx/

# Each flow measured against its baseline (docs/BENCHMARKS.md).
bench: build
	./$(BIN) bench orders
	./$(BIN) bench payments
	./$(BIN) bench likes
	./$(BIN) bench seats

# Local stand-ins for every image compose and the tests need, built from
# Debian packages, for a Docker engine that cannot pull (README, "No
# registry access?"). Writes .images/env.
images:
	deploy/images/build.sh

# The shop image (SHOP_IMAGE, default shop:local) from the Dockerfile, with
# the modules vendored into the build context: the build needs no network.
image:
	deploy/images/shop-image.sh

# Compose smoke test: the whole stack up, a scenario through the load
# balancer with a replica and a Redis node stopped mid-run, then down.
E2E_TIMEOUT ?= 20m
e2e: image
	$(GO) test -tags e2e -count=1 -v -timeout $(E2E_TIMEOUT) ./e2e/

clean:
	rm -rf bin
