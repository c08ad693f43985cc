package testenv

import (
	"context"
	"os"
	"strings"

	"github.com/testcontainers/testcontainers-go"
)

// Servers starts, for a whole `go test` run, the servers the tests would
// otherwise start once per test binary: a PostgreSQL container unless
// SHOP_TEST_POSTGRES_URL names a server, RedisNodes Redis containers
// unless SHOP_TEST_REDIS_ADDRS names nodes. It returns the environment
// (KEY=value) that points every test binary at them, and stop, which
// terminates what it started. Each test still gets a database of its own
// (the shared template) and its own Redis keys, so packages run in
// parallel against the same servers as they do against a developer's.
//
// cmd/testsummary calls it before go test: one set of containers for the
// run instead of one per package.
func Servers(ctx context.Context) (environ []string, stop func(), err error) {
	url, addrs, containers, err := startServers(ctx)
	e := &env{containers: containers}
	if err != nil {
		return nil, e.stop, err
	}
	return []string{EnvPostgresURL + "=" + url, EnvRedisAddrs + "=" + strings.Join(addrs, ",")}, e.stop, nil
}

// startServers returns the PostgreSQL server's URL and the Redis nodes'
// addresses: those SHOP_TEST_POSTGRES_URL and SHOP_TEST_REDIS_ADDRS name,
// else containers it starts, which it returns, even on error, for the
// caller to terminate.
func startServers(ctx context.Context) (url string, addrs []string, containers []testcontainers.Container, err error) {
	if url = os.Getenv(EnvPostgresURL); url == "" {
		// Shared by every package of a run (Servers): more connections
		// than the image's 100.
		var c testcontainers.Container
		c, url, err = startPostgres(ctx, "-c", "max_connections=500")
		if c != nil {
			containers = append(containers, c)
		}
		if err != nil {
			return "", nil, containers, err
		}
	}
	for _, a := range strings.Split(os.Getenv(EnvRedisAddrs), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		for range RedisNodes {
			c, addr, err := startRedis(ctx)
			if c != nil {
				containers = append(containers, c)
			}
			if err != nil {
				return "", nil, containers, err
			}
			addrs = append(addrs, addr)
		}
	}
	return url, addrs, containers, nil
}
