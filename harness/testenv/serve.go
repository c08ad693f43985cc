package testenv

import (
	"context"
	"os"
	"strings"
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
	e := &env{}
	stop = e.stop
	if u := os.Getenv(EnvPostgresURL); u != "" {
		environ = append(environ, EnvPostgresURL+"="+u)
	} else {
		c, u, err := startPostgres(ctx, "-c", "max_connections=500")
		if c != nil {
			e.containers = append(e.containers, c)
		}
		if err != nil {
			return nil, stop, err
		}
		environ = append(environ, EnvPostgresURL+"="+u)
	}
	if a := os.Getenv(EnvRedisAddrs); a != "" {
		environ = append(environ, EnvRedisAddrs+"="+a)
	} else {
		var addrs []string
		for range RedisNodes {
			c, addr, err := startRedis(ctx)
			if c != nil {
				e.containers = append(e.containers, c)
			}
			if err != nil {
				return nil, stop, err
			}
			addrs = append(addrs, addr)
		}
		environ = append(environ, EnvRedisAddrs+"="+strings.Join(addrs, ","))
	}
	return environ, stop, nil
}
