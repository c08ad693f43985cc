package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// The containers, when no running server is given.
//
// testcontainers uses an image that is present locally as is and pulls only
// what is missing, so a machine without registry access runs the tests on
// local stand-ins (SHOP_TEST_POSTGRES_IMAGE, SHOP_TEST_REDIS_IMAGE; README,
// "No registry access?"). The reaper (Ryuk) is an image too: there it is
// off (TESTCONTAINERS_RYUK_DISABLED=true) and this package cleans up itself.
// Main terminates the containers when the tests end or the binary is
// interrupted; every container carries ContainerLabel, so what a crashed
// binary (a panic, -timeout) leaves behind is found and removed with
//
//	docker rm -fv $(docker ps -aq --filter label=org.shop-example.testenv)
const (
	defaultPostgresImage = "postgres:16-alpine"
	defaultRedisImage    = "redis:7-alpine"

	// postgresData is PGDATA in both the official image and the local
	// stand-in (deploy/images/postgres).
	postgresData = "/var/lib/postgresql/data"

	// ContainerLabel marks every container this package starts.
	ContainerLabel = "org.shop-example.testenv"
)

var containerLabels = map[string]string{ContainerLabel: "true"}

// startPostgres starts a PostgreSQL container and returns it with a URL of
// its maintenance database; args are added to the server's command line
// (-c name=value). The container is returned even on error, so the caller
// can terminate it.
func startPostgres(ctx context.Context, args ...string) (testcontainers.Container, string, error) {
	c, err := tcpostgres.Run(ctx, imageFrom(EnvPostgresImage, defaultPostgresImage),
		tcpostgres.WithDatabase("shop"),
		tcpostgres.WithUsername("shop"),
		tcpostgres.WithPassword("shop"),
		// The module runs `postgres -c fsync=off`; the cluster need not be
		// synced to disk when it is created either.
		testcontainers.WithEnv(map[string]string{"POSTGRES_INITDB_ARGS": "--no-sync"}),
		// The cluster in memory: a test database is created from the
		// template and dropped again hundreds of times in a run, and a
		// container's own filesystem may be slow to write (fuse-overlayfs:
		// every file through a FUSE daemon), which it then is for each.
		testcontainers.WithTmpfs(map[string]string{postgresData: "rw"}),
		testcontainers.WithLabels(containerLabels),
		testcontainers.WithCmdArgs(args...),
		// The image's entrypoint starts a server to initialise the database,
		// stops it and starts the real one: ready is logged twice.
		tcpostgres.BasicWaitStrategies(),
	)
	if c == nil {
		return nil, "", fmt.Errorf("start postgres container: %w", err)
	}
	if err != nil {
		return c, "", fmt.Errorf("start postgres container: %w", err)
	}
	u, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return c, "", fmt.Errorf("postgres container url: %w", err)
	}
	if addr, ok := direct(ctx, c, "5432"); ok {
		pu, err := url.Parse(u)
		if err != nil {
			return c, "", fmt.Errorf("postgres container url: %w", err)
		}
		pu.Host = addr
		u = pu.String()
	}
	return c, u, nil
}

// startRedis starts a Redis container and returns it with its address. The
// module waits for the port and for "Ready to accept connections".
func startRedis(ctx context.Context) (testcontainers.Container, string, error) {
	c, err := tcredis.Run(ctx, imageFrom(EnvRedisImage, defaultRedisImage),
		testcontainers.WithLabels(containerLabels),
		// No snapshots: the image's defaults save the data set to its
		// filesystem every minute under the tests' writes.
		testcontainers.WithCmdArgs("--save", ""),
	)
	if c == nil {
		return nil, "", fmt.Errorf("start redis container: %w", err)
	}
	if err != nil {
		return c, "", fmt.Errorf("start redis container: %w", err)
	}
	ep, err := c.Endpoint(ctx, "")
	if err != nil {
		return c, "", fmt.Errorf("redis container address: %w", err)
	}
	if addr, ok := direct(ctx, c, "6379"); ok {
		ep = addr
	}
	return c, ep, nil
}

// direct returns the container's own address for port when this host
// reaches it, as a Linux host reaches its bridge network: the tests then
// bypass the published port, which the engine may forward through a
// docker-proxy process of its own, a copy of every byte in each direction
// that took a quarter of a core under the tests' load. Where the container
// is not reachable (Docker Desktop's virtual machine), the published port
// is kept.
func direct(ctx context.Context, c testcontainers.Container, port string) (string, bool) {
	ip, err := c.ContainerIP(ctx)
	if err != nil || ip == "" {
		return "", false
	}
	addr := net.JoinHostPort(ip, port)
	conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", false
	}
	conn.Close()
	return addr, true
}

// stopOnSignal terminates the containers when the test binary is
// interrupted (Ctrl-C, or go test forwarding a signal), which would
// otherwise end the process with them still running.
func stopOnSignal(e *env) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		e.stop()
		fmt.Fprintf(os.Stderr, "testenv: %s: containers terminated\n", s)
		os.Exit(1)
	}()
}

func imageFrom(envVar, def string) string {
	if v := os.Getenv(envVar); v != "" {
		return v
	}
	return def
}
