# shop — common tasks. `make test` is the command CI runs.

GO      ?= go
BIN     ?= bin/shop
PKGS    ?= ./...
FUZZTIME ?= 30s

.PHONY: all build test test-short run migrate seed lint fmt fuzz bench clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/shop

# Every test, with the race detector, against real PostgreSQL and Redis:
# testcontainers starts them, unless SHOP_TEST_POSTGRES_URL and
# SHOP_TEST_REDIS_ADDRS point at running servers.
test:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

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

fmt:
	gofmt -w $$(git ls-files '*.go')

# Run the order-request fuzzer for a while (the seed corpus runs in `make test`).
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeCreate -fuzztime $(FUZZTIME) ./internal/orders/

# Order creation: layered HTTP flow against the raw SQL baseline.
bench: build
	./$(BIN) bench orders

clean:
	rm -rf bin
