// Package testenv gives tests real PostgreSQL and Redis servers.
//
// By default it starts them with testcontainers, once per test binary, and
// stops them when the binary's tests end (each package calls testenv.Main
// from its TestMain); containers.go says how, and how they are cleaned up
// without the reaper. SHOP_TEST_POSTGRES_URL and SHOP_TEST_REDIS_ADDRS point
// the tests at servers that already run instead.
//
// Every test gets a database of its own, cloned from a migrated template, so
// test packages and parallel tests never see each other's rows.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/testcontainers/testcontainers-go"

	"github.com/shop-example/shop/internal/platform/postgres"
)

// Environment variables that configure the test servers.
const (
	EnvPostgresURL   = "SHOP_TEST_POSTGRES_URL"   // a server to use instead of a container (any database on it)
	EnvRedisAddrs    = "SHOP_TEST_REDIS_ADDRS"    // comma-separated Redis nodes to use instead of containers
	EnvPostgresImage = "SHOP_TEST_POSTGRES_IMAGE" // image for the PostgreSQL container
	EnvRedisImage    = "SHOP_TEST_REDIS_IMAGE"    // image for the Redis containers

	// RedisNodes is how many Redis nodes the lock quorum gets in tests.
	RedisNodes = 3
)

// env holds the servers of one test binary. Tests share it through the
// package-level instance below: a test binary is one process, and starting
// containers once per process is what keeps the suite fast.
type env struct {
	mu         sync.Mutex
	started    bool
	startErr   error
	serverURL  string // a URL to the server's maintenance database
	redisAddrs []string
	template   string
	containers []testcontainers.Container
}

var shared env

// Main runs the package's tests and then stops the containers they started,
// also when the binary is interrupted. Use it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	stopOnSignal(&shared)
	code := m.Run()
	shared.stop()
	if shopBin.dir != "" {
		_ = os.RemoveAll(shopBin.dir)
	}
	os.Exit(code)
}

func (e *env) start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return e.startErr
	}
	e.started = true
	e.startErr = e.startLocked(ctx)
	return e.startErr
}

func (e *env) startLocked(ctx context.Context) error {
	url, addrs, containers, err := startServers(ctx)
	e.containers = append(e.containers, containers...)
	if err != nil {
		return err
	}
	e.serverURL, e.redisAddrs = url, addrs

	tpl, err := ensureTemplate(ctx, e.serverURL)
	if err != nil {
		return err
	}
	e.template = tpl
	return nil
}

func (e *env) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.containers {
		_ = testcontainers.TerminateContainer(c)
	}
	e.containers = nil
}

func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL and Redis; skipped with -short")
	}
}

// DatabaseURL creates an empty-of-rows, fully migrated database for this
// test and returns its URL. The database is dropped when the test ends.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	skipShort(t)
	ctx := context.Background()
	if err := shared.start(ctx); err != nil {
		t.Fatalf("test environment: %v", err)
	}
	name := "test_" + randomHex(8)
	admin, err := pgx.Connect(ctx, shared.serverURL)
	if err != nil {
		t.Fatalf("connect to test server: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, shared.template)); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), shared.serverURL)
		if err != nil {
			t.Logf("drop test database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	return withDatabase(t, shared.serverURL, name)
}

// Pool returns a pool connected to a fresh database of this test's own,
// closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolFor(t, DatabaseURL(t))
}

// testPoolSize bounds each test's pool. Races still overlap in the
// database (the rest wait in the pool), and two test packages running at
// once, each with a few pools, stay under a default max_connections of 100.
const testPoolSize = 10

// PoolFor returns a pool connected to url, closed when the test ends.
func PoolFor(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := postgres.Open(context.Background(), url, testPoolSize)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// RedisAddrs returns the addresses of the Redis nodes of the lock quorum.
// Tests share the nodes; keep keys unique per test (the ids in them are).
func RedisAddrs(t testing.TB) []string {
	t.Helper()
	skipShort(t)
	if err := shared.start(context.Background()); err != nil {
		t.Fatalf("test environment: %v", err)
	}
	return append([]string(nil), shared.redisAddrs...)
}

// ensureTemplate creates, once per server and schema, a database with every
// migration applied, named after a hash of the migrations. Test binaries
// running at once agree on it through an advisory lock.
func ensureTemplate(ctx context.Context, serverURL string) (string, error) {
	name := "shop_template_" + migrationsHash()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect to test server: %w", err)
	}
	defer conn.Close(ctx)
	lockCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := conn.Exec(lockCtx, "SELECT pg_advisory_lock(hashtext($1))", name); err != nil {
		return "", fmt.Errorf("lock template: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtext($1))", name) //nolint:errcheck

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop half-built template: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	u, err := databaseURL(serverURL, building)
	if err != nil {
		return "", err
	}
	if err := postgres.MigrateUp(u); err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	// Renaming last means a crashed build never leaves a template that
	// looks done. Closing it to connections keeps a stray client from
	// writing rows that every test database would then inherit.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name); err != nil {
		return "", fmt.Errorf("publish template: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+name+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return "", fmt.Errorf("close template: %w", err)
	}
	return name, nil
}

func withDatabase(t testing.TB, serverURL, name string) string {
	t.Helper()
	u, err := databaseURL(serverURL, name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func databaseURL(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", EnvPostgresURL, err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
