# shop — common tasks. `make test` is the command CI runs.

GO      ?= go
BIN     ?= bin/shop
PKGS    ?= ./...
FUZZTIME ?= 30s

# Every go command here builds with -trimpath. Without it the build cache
# keys each package of this module by the folder it is in, so another
# clone (a CI checkout, a git worktree) compiled the whole module again;
# with it, clones share what is compiled. Tests find the repository from
# their working directory (testenv.RepoRoot), not from source paths.
export GOFLAGS := $(strip $(filter-out -trimpath,$(GOFLAGS)) -trimpath)

# The fault suite (harness/faults, docs/RELIABILITY.md): every flow under
# Redis loss, a paused lock holder, gateway and database faults and replica
# crashes (TestFaults), and PostgreSQL failed over to its standby
# (TestFailover: the server's programs, Debian's postgresql-15).
# SHOP_FAULTS_SIZE=large for longer phases; SHOP_FAULTS_REPORT=file
# writes the figures as Markdown.
FAULTS_TIMEOUT ?= 20m

.PHONY: faults linearizability ablation all build test test-browser test-short run migrate seed lint fmt fuzz bench images image clean-images e2e clean up up-observability failover-demo down logs load load-check

# .env (written by `make images`, ignored by git) names the images to use
# instead of the official ones. docker compose reads it by itself; here its
# variables reach the tests (testcontainers) and the image build too,
# unless the shell already sets them, as with compose.
ifneq ($(wildcard .env),)
$(foreach kv,$(shell grep -E '^[A-Za-z_][A-Za-z0-9_]*=[^ ]*$$' .env),$(if $(filter environment command,$(origin $(firstword $(subst =, ,$(kv))))),,$(eval export $(kv))))
endif

# The compose command: the plugin (`docker compose`) if there is one, else
# docker-compose 1.29.
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo 'docker compose' || echo docker-compose)

all: build

# Built as the shop image's binary is (deploy/images/shop-image.sh):
# static, without paths or VCS stamps, so make load or make run after
# make up finds every package in Go's build cache and only links.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -o $(BIN) ./cmd/shop

# Every test, with the race detector, against real PostgreSQL and Redis:
# cmd/testsummary starts them with testcontainers once for the whole run
# (one PostgreSQL, three Redis nodes, shared by every package), unless
# SHOP_TEST_POSTGRES_URL and SHOP_TEST_REDIS_ADDRS point at running
# servers. It shows the run as go test does and ends it with "N passed,
# N failed, N skipped"; it exits non-zero when go test does.
test:
	$(GO) build -o bin/testsummary ./cmd/testsummary
	GO=$(GO) bin/testsummary -race -count=1 -timeout 30m $(PKGS)

# The pages of web/ in real Chromium (Debian's chromium package;
# SHOP_CHROMIUM names another binary): register, buy, pay, cancel, like and
# each race-lab scenario against two replicas, checked against the API.
# Screenshots go to bin/screenshots.
test-browser:
	SHOP_SCREENSHOTS=$(CURDIR)/bin/screenshots $(GO) test -tags browser -count=1 -timeout 10m -run '^TestBrowser$$' ./web/

# The ablation matrices, rewriting docs/ABLATION.md with what they saw:
# the cross-flow ones in internal/app, each flow's own beside it. -p 1 runs
# the packages one after another: each rewrites the same file, and each
# measures on a machine the other does not load.
ablation:
	SHOP_UPDATE_DOCS=1 $(GO) test -race -count=1 -p 1 -timeout 20m -run '^TestAblation_' ./internal/app/ ./internal/likes/ ./internal/seats/

faults:
	$(GO) test -tags faults -count=1 -timeout $(FAULTS_TIMEOUT) -v -run '^(TestFaults|TestFailover)$$' ./harness/faults/

# The seat map's linearizability check at its larger size (64 clients,
# thousands of operations); `make test` runs it small.
linearizability:
	SHOP_SEATS_LINEARIZABILITY_LARGE=1 $(GO) test -race -count=1 -run '^TestSeats_Linearizable' ./internal/seats/

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
	$(GO) vet -tags faults ./harness/faults/
	$(GO) vet -tags browser ./web/

fmt:
	gofmt -w $$(git ls-files '*.go')

# Run the request-body fuzzers for a while (their seed corpora run in `make test`).
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeCreate -fuzztime $(FUZZTIME) ./internal/orders/
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./internal/platform/httpx/

# Each flow measured against its baseline, then every way to guard each
# flow side by side, redrawing the chart, then the four flows from outside
# against two replicas, then the outbox's relay and consumers, then the
# goals of the last runs side by side (read from git, not measured). Each
# command writes its tables into its generated blocks of docs/BENCHMARKS.md
# or docs/STRATEGIES.md, naming itself, the commit and the machine. Each
# refuses, before measuring anything, a tree with code not yet committed,
# and a box whose 1-minute load average is above its cores: it waits
# BENCH_SETTLE for the load to fall (the bench before it leaves the load
# high for a minute or two), then stops `make bench` at the first refusal.
# BENCH_FLAGS=-loaded writes anyway, marking the tables LOADED BOX
# (docs/BENCHMARKS.md, "Publishing figures").
BENCH_SETTLE ?= 3m
BENCH_FLAGS  ?=
BENCH        = ./$(BIN) bench
BENCH_DOC    = -settle $(BENCH_SETTLE) $(BENCH_FLAGS)
bench: build
	$(BENCH) orders -doc docs/BENCHMARKS.md $(BENCH_DOC)
	$(BENCH) payments -doc docs/BENCHMARKS.md $(BENCH_DOC)
	$(BENCH) likes -doc docs/BENCHMARKS.md $(BENCH_DOC)
	$(BENCH) seats -doc docs/BENCHMARKS.md $(BENCH_DOC)
	$(BENCH) strategies -doc docs/STRATEGIES.md -chart docs/strategies.svg $(BENCH_DOC)
	$(BENCH) outside -doc docs/STRATEGIES.md $(BENCH_DOC)
	$(BENCH) events -doc docs/BENCHMARKS.md $(BENCH_DOC)
	$(BENCH) tracing -doc docs/BENCHMARKS.md $(BENCH_DOC)
	$(BENCH) history -doc docs/STRATEGIES.md

# A bundled k6 script against the running compose stack (make up), run by
# `shop load` (no k6 needed): SCRIPT is a path or a name of loadtest/k6
# (smoke), VUS and DURATION are k6's --vus and --duration (they replace the
# script's scenarios with its default function), LOAD_ARGS passes more,
# e.g. LOAD_ARGS='-e BUYERS=100 -e STOCK=20'. It restarts the replicas
# with the rate limits off if they are on; the summary, its JSON and an
# HTML report go to LOAD_OUT (bin/load). See loadtest/make-load.sh.
SCRIPT    ?= smoke
VUS       ?=
DURATION  ?=
LOAD_ARGS ?=
LOAD_OUT  ?= bin/load
load: build
	@BIN=$(BIN) COMPOSE="$(COMPOSE)" SCRIPT=$(SCRIPT) VUS=$(VUS) DURATION=$(DURATION) LOAD_ARGS='$(LOAD_ARGS)' LOAD_OUT=$(LOAD_OUT) loadtest/make-load.sh

# The k6 scripts checked without k6 (also part of `make test`): each runs
# with a few VUs against two replicas, the gateway, PostgreSQL and Redis.
load-check:
	$(GO) test -race -count=1 -timeout 10m ./harness/k6compat/

# Local stand-ins for every image compose and the tests need, built from
# Debian packages, for a Docker engine that cannot pull (docs/CONTAINERS.md,
# "No registry access?"). Writes .images/env and .env.
images:
	deploy/images/build.sh

# The shop image (SHOP_IMAGE, default shop:local): with Go on the host, the
# binary built here (the host's Go build cache: seconds when little
# changed) on the runtime image; else the Dockerfile, with the modules
# vendored into the build context. Either way the build needs no network
# and leaves no dangling image.
image:
	deploy/images/shop-image.sh

# The disk make up's images take: the shop image, the stand-ins and their
# cache of root filesystems (deploy/images/clean.sh). Stop the stacks first
# (make down); an image a container still uses is kept, and named.
clean-images:
	deploy/images/clean.sh

# Compose smoke test: the whole stack up, a scenario through the load
# balancer with a replica and a Redis node stopped mid-run, then down.
E2E_TIMEOUT ?= 20m
e2e: image
	$(GO) test -tags e2e -count=1 -v -timeout $(E2E_TIMEOUT) ./e2e/

# The compose stack in the background (deploy/up.sh): the shop's binary
# built on the host meanwhile, when it has Go; the base images present,
# pulled, or, on an engine that cannot pull, the missing ones built as
# local stand-ins (as root; mmdebstrap is installed if missing); the shop
# image (make image); a stack of another project of this checkout on its
# ports (the failover demo's) taken down; then compose up, saying what it
# waits for until the load balancer's /readyz answers, and the addresses
# and the demo user's token. Run again, it reuses what runs.
up:
	COMPOSE="$(COMPOSE)" deploy/up.sh

# make up with the observability profile: Prometheus, keeping the latency's
# exemplars, and Jaeger, to which every replica, the gateway and the mailer
# send their spans (SHOP_OTLP_ENDPOINT=http://jaeger:4318). On an engine
# that cannot pull Jaeger, its stand-in is built from Jaeger's Go module
# first (deploy/images/build.sh jaeger, 3 to 8 minutes the first time).
# With make up's stack running, it adds to it (compose recreates the
# services whose settings change). Prints the shop's trace page,
# /web/trace.html, which reads Jaeger's query API (docs/OPERATIONS.md,
# "Traces").
up-observability:
	COMPOSE="$(COMPOSE)" deploy/up.sh --observability

# The shop through a PostgreSQL failover (deploy/failover-demo.sh): make up
# with the ha profile (a synchronous standby; deploy/ha.env) as the compose
# project shop-ha, orders placed through the balancer for a bounded while,
# the primary's container killed mid-stream and the standby promoted
# (deploy/failover.sh); then the answers (503, never 500) and a check that
# every order answered 201 is on the new primary. It stops make up's stack
# first if it runs (its volumes kept; make up brings it back) and removes
# a previous demo's; on success it leaves its stack up and prints how to
# take it down, on failure it takes it down (docs/OPERATIONS.md,
# "PostgreSQL failover in compose"). ARGS=--no-build uses the shop image
# as it is.
failover-demo:
	COMPOSE="$(COMPOSE)" deploy/failover-demo.sh $(ARGS)

# ARGS=-v also removes the data volumes; make clean-images then gives back
# the images' disk.
# Every profile's containers go, whichever make target started them.
down:
	COMPOSE_PROFILES=$${COMPOSE_PROFILES:-observability,ha,load} $(COMPOSE) down --remove-orphans $(ARGS)

logs:
	$(COMPOSE) logs -f --tail=100

clean:
	rm -rf bin
