package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// benchStock is every bench product's stock: more than any run can sell, so
// that what is measured is successful orders, never "out of stock".
const benchStock = 1_000_000_000

// scratchDB is a database of the bench's own on the server it was given.
type scratchDB struct {
	name  string
	url   string
	admin string // URL of the database it was created from, to drop it
}

// openScratch creates the scratch database on the -db server, migrates it
// and opens the bench's own pool on it (seeding, the raw baselines, the
// checks): a connection per client, as far as the server has room
// (baselineConns). The caller closes the pool, then drops the database.
func openScratch(ctx context.Context, o benchOptions, logger *slog.Logger) (*scratchDB, *pgxpool.Pool, error) {
	db, err := createScratchDB(ctx, o.dbURL)
	if err != nil {
		return nil, nil, err
	}
	logger.Info("bench: scratch database created", "name", db.name)
	if err := postgres.MigrateUp(db.url); err != nil {
		return nil, nil, errors.Join(err, db.drop())
	}
	var free int
	if err := queryOnce(ctx, o.dbURL, sqlFreeConns, &free); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("count free connections: %w", err), db.drop())
	}
	conns := baselineConns(o.clients, free, o.serviceConns)
	if conns < 1 {
		return nil, nil, errors.Join(fmt.Errorf("the server has %d connections free, and the service's pools take %d", free, o.serviceConns), db.drop())
	}
	if conns < o.clients {
		logger.Warn("bench: the raw baselines share fewer connections than there are clients",
			"clients", o.clients, "connections", conns, "free on the server", free, "kept for the service", o.serviceConns)
	}
	pool, err := postgres.Open(ctx, db.url, int32(conns), o.meter.poolOptions()...)
	if err != nil {
		return nil, nil, errors.Join(err, db.drop())
	}
	return db, pool, nil
}

// sqlFreeConns is how many more client connections the server admits.
const sqlFreeConns = `SELECT current_setting('max_connections')::int
	- current_setting('superuser_reserved_connections')::int
	- (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`

// connsMargin is left free for anything else that connects meanwhile (psql,
// a monitoring probe, the bench's own one-off connections).
const connsMargin = 4

// baselineConns sizes the bench's pool: one connection per client, but
// under the free connections less the service's pools and a margin. A
// baseline holding a connection per client once took every slot of a
// server at max_connections 100, so the layered scenarios that followed
// met "too many clients" (SQLSTATE 53300) and measured nothing.
func baselineConns(clients, free, service int) int {
	return min(clients, free-service-connsMargin)
}

// createScratchDB creates an empty database bench_<random> on the server of
// serverURL. It only runs CREATE DATABASE there.

func createScratchDB(ctx context.Context, serverURL string) (*scratchDB, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, fmt.Errorf("parse -db: %w", err)
	}
	name := "bench_" + strings.ToLower(rand.Text()[:10])
	if err := execOnce(ctx, serverURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create scratch database: %w", err)
	}
	u.Path = "/" + name
	return &scratchDB{name: name, url: u.String(), admin: serverURL}, nil
}

// drop removes the scratch database, closing whatever still uses it. It runs
// even when the bench was interrupted.
func (d *scratchDB) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := execOnce(ctx, d.admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop scratch database %s: %w", d.name, err)
	}
	return nil
}

func queryOnce(ctx context.Context, dbURL, sql string, dst ...any) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql).Scan(dst...)
}

func execOnce(ctx context.Context, dbURL, sql string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// fixture is what the scenarios buy with: one user per client, and the
// SKUs of each scenario (scenario i buys from skus[i]).
type fixture struct {
	userIDs []string
	tokens  []string
	skus    [4][]string
}

const sqlSeedProducts = `INSERT INTO products (sku, name, price_cents, stock_available, created_at, updated_at)
	SELECT $1::text || g, 'bench product ' || $1::text || g, 1000, $3, now(), now()
	FROM generate_series(1, $2) AS g`

// seedBench creates the users through the auth store (so their tokens are
// real) and the products in one statement per scenario: raw/hot and
// layered/hot get one SKU each, raw/spread and layered/spread -skus each.
func seedBench(ctx context.Context, pool *pgxpool.Pool, o benchOptions) (fixture, error) {
	var fx fixture
	var err error
	if fx.userIDs, fx.tokens, err = seedUsers(ctx, pool, o.clients); err != nil {
		return fx, err
	}
	for i, n := range []int{1, 1, o.skus, o.skus} {
		prefix := fmt.Sprintf("BENCH%d-", i)
		if _, err := pool.Exec(ctx, sqlSeedProducts, prefix, n, benchStock); err != nil {
			return fx, fmt.Errorf("seed products: %w", err)
		}
		for g := 1; g <= n; g++ {
			fx.skus[i] = append(fx.skus[i], prefix+strconv.Itoa(g))
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE"); err != nil {
		return fx, fmt.Errorf("analyze: %w", err)
	}
	return fx, nil
}

// seedUsers creates n users through the auth store, so their tokens are
// real, and returns their ids and bearer tokens.
func seedUsers(ctx context.Context, pool *pgxpool.Pool, n int) (ids, tokens []string, err error) {
	users := auth.NewStore(pool)
	for i := range n {
		u, token, err := users.CreateUser(ctx, fmt.Sprintf("bench client %d", i))
		if err != nil {
			return nil, nil, fmt.Errorf("seed user: %w", err)
		}
		ids, tokens = append(ids, u.ID), append(tokens, token)
	}
	return ids, tokens, nil
}
