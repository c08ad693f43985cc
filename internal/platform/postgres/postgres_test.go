package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	neturl "net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/postgres"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// scratchSchema is created in each test's own database: the tests exercise
// the helpers, not the shop's schema, so they do not depend on migrations.
const scratchSchema = `
CREATE TABLE parents (id int PRIMARY KEY);
CREATE TABLE things (
    id        int  PRIMARY KEY,
    code      text CONSTRAINT things_code_key UNIQUE,
    qty       int  NOT NULL DEFAULT 0 CONSTRAINT things_qty_nonnegative CHECK (qty >= 0),
    parent_id int  CONSTRAINT things_parent_fkey REFERENCES parents (id)
);
CREATE TABLE slots (
    during int4range,
    CONSTRAINT slots_no_overlap EXCLUDE USING gist (during WITH &&)
);
CREATE TABLE deferred (
    id int CONSTRAINT deferred_id_key UNIQUE DEFERRABLE INITIALLY DEFERRED
);
`

// mustScratch returns a pool on a fresh database holding the scratch
// tables. A transaction InTx failed to end keeps its connection, and
// pgxpool's Close waits for it forever: the cleanup turns that hang into
// a failure.
func mustScratch(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := postgres.Open(context.Background(), testenv.DatabaseURL(t), 10)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { pool.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Error("pool.Close did not return: a transaction's connection was never released")
		}
	})
	if _, err := pool.Exec(context.Background(), scratchSchema); err != nil {
		t.Fatalf("create scratch tables: %v", err)
	}
	return pool
}

func countRows(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// assertReleased checks the transaction's connection went back to the pool:
// a leaked one would hold its locks until the pool is closed.
func assertReleased(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d connections still acquired after InTx", n)
	}
}

func TestInTx_Commit(t *testing.T) {
	t.Parallel()
	pool := mustScratch(t)
	ctx := context.Background()
	calls := 0
	err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		calls++
		_, err := tx.Exec(ctx, "INSERT INTO things (id) VALUES (1), (2)")
		return err
	})
	if err != nil {
		t.Fatalf("InTx = %v", err)
	}
	if calls != 1 {
		t.Errorf("fn ran %d times, want 1", calls)
	}
	if n := countRows(t, pool, "things"); n != 2 {
		t.Errorf("things has %d rows, want 2 committed", n)
	}
	assertReleased(t, pool)
}

func TestInTx_RollbackOnError(t *testing.T) {
	t.Parallel()
	pool := mustScratch(t)
	ctx := context.Background()
	errRefused := errors.New("refused")
	err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO things (id) VALUES (1)"); err != nil {
			return err
		}
		return fmt.Errorf("after insert: %w", errRefused)
	})
	if !errors.Is(err, errRefused) {
		t.Fatalf("InTx = %v, want fn's error", err)
	}
	if n := countRows(t, pool, "things"); n != 0 {
		t.Errorf("things has %d rows after a failed transaction, want 0", n)
	}
	assertReleased(t, pool)
}

func TestInTx_RollbackOnPanic(t *testing.T) {
	t.Parallel()
	pool := mustScratch(t)
	ctx := context.Background()
	type boom struct{ msg string }
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO things (id) VALUES (1)"); err != nil {
				t.Errorf("insert: %v", err)
			}
			panic(boom{"mid-transaction"})
		})
	}()
	if recovered != (boom{"mid-transaction"}) {
		t.Fatalf("recovered %v, want the panic re-raised unchanged", recovered)
	}
	if n := countRows(t, pool, "things"); n != 0 {
		t.Errorf("things has %d rows after a panic, want 0", n)
	}
	assertReleased(t, pool)
}

// A constraint checked at COMMIT fails the commit, not a statement: InTx
// must report it, and the rows must not be there.
func TestInTx_CommitError(t *testing.T) {
	t.Parallel()
	pool := mustScratch(t)
	ctx := context.Background()
	err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		// Both inserts succeed: the unique check waits for COMMIT.
		_, err := tx.Exec(ctx, "INSERT INTO deferred (id) VALUES (1), (1)")
		return err
	})
	if err == nil {
		t.Fatal("InTx = nil, want the commit error")
	}
	if !strings.HasPrefix(err.Error(), "commit: ") {
		t.Errorf("InTx = %q, want it to say the commit failed", err)
	}
	if got := postgres.SQLState(err); got != "23505" {
		t.Errorf("SQLState = %q, want 23505", got)
	}
	if got := postgres.ConstraintViolated(err); got != "deferred_id_key" {
		t.Errorf("ConstraintViolated = %q, want deferred_id_key", got)
	}
	if n := countRows(t, pool, "deferred"); n != 0 {
		t.Errorf("deferred has %d rows after a failed commit, want 0", n)
	}
	assertReleased(t, pool)
}

// fn that swallows a statement error and returns nil leaves an aborted
// transaction: COMMIT turns into ROLLBACK, and InTx must not call that a
// success.
func TestInTx_CommitOfAbortedTransaction(t *testing.T) {
	t.Parallel()
	pool := mustScratch(t)
	ctx := context.Background()
	err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO things (id) VALUES (1)"); err != nil {
			return err
		}
		_, _ = tx.Exec(ctx, "INSERT INTO things (id, qty) VALUES (2, -1)") // error ignored on purpose
		return nil
	})
	if err == nil {
		t.Fatal("InTx = nil for a transaction the server rolled back")
	}
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Errorf("InTx = %v, want pgx.ErrTxCommitRollback in the chain", err)
	}
	if n := countRows(t, pool, "things"); n != 0 {
		t.Errorf("things has %d rows, want 0", n)
	}
	assertReleased(t, pool)
}

func TestInTx_BeginError(t *testing.T) {
	t.Parallel()
	pool := mustScratch(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	err := postgres.InTx(ctx, pool, func(pgx.Tx) error { called = true; return nil })
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "begin: ") {
		t.Errorf("InTx(cancelled ctx) = %v, want a begin error wrapping context.Canceled", err)
	}
	if called {
		t.Error("fn ran without a transaction")
	}
}

// The context ending inside fn still rolls back and frees the connection:
// the rollback does not use the cancelled context, so the ROLLBACK is sent
// and the connection goes back to the pool clean instead of being thrown
// away mid-transaction.
func TestInTx_ContextCancelledInFn(t *testing.T) {
	t.Parallel()
	pool := mustScratch(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var txPID uint32
	err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO things (id) VALUES (1)"); err != nil {
			return err
		}
		txPID = tx.Conn().PgConn().PID()
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("InTx = %v, want context.Canceled", err)
	}
	// The pool holds one connection (mustScratch used it): the next query
	// gets the transaction's own connection back, not a replacement.
	var pid uint32
	if err := pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if pid != txPID {
		t.Errorf("next query ran on backend %d, want the transaction's %d back in the pool", pid, txPID)
	}
	if n := countRows(t, pool, "things"); n != 0 {
		t.Errorf("things has %d rows, want 0", n)
	}
	assertReleased(t, pool)
}

func TestConstraintViolated(t *testing.T) {
	t.Parallel()
	pool := mustScratch(t)
	ctx := context.Background()
	setup := []string{
		"INSERT INTO parents (id) VALUES (1)",
		"INSERT INTO things (id, code, parent_id) VALUES (1, 'a', 1)",
		"INSERT INTO slots (during) VALUES ('[1,10)')",
	}
	for _, s := range setup {
		if _, err := pool.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	tests := []struct {
		name, sql, state, constraint string
	}{
		{"Unique", "INSERT INTO things (id, code) VALUES (2, 'a')", "23505", "things_code_key"},
		{"PrimaryKey", "INSERT INTO things (id) VALUES (1)", "23505", "things_pkey"},
		{"Check", "UPDATE things SET qty = -1 WHERE id = 1", "23514", "things_qty_nonnegative"},
		{"ForeignKeyInsert", "INSERT INTO things (id, parent_id) VALUES (3, 99)", "23503", "things_parent_fkey"},
		{"ForeignKeyDelete", "DELETE FROM parents WHERE id = 1", "23503", "things_parent_fkey"},
		{"Exclusion", "INSERT INTO slots (during) VALUES ('[5,15)')", "23P01", "slots_no_overlap"},
		{"NotNull", "INSERT INTO things (id, qty) VALUES (4, NULL)", "23502", ""},
		{"Syntax", "INSERT INTO", "42601", ""},
		{"UndefinedTable", "SELECT * FROM no_such_table", "42P01", ""},
		{"DivisionByZero", "SELECT 1/0", "22012", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := pool.Exec(ctx, tt.sql)
			if err == nil {
				t.Fatalf("%s succeeded, want an error", tt.sql)
			}
			wrapped := fmt.Errorf("store op: %w", err)
			if got := postgres.ConstraintViolated(wrapped); got != tt.constraint {
				t.Errorf("ConstraintViolated = %q, want %q", got, tt.constraint)
			}
			if got := postgres.SQLState(wrapped); got != tt.state {
				t.Errorf("SQLState = %q, want %q", got, tt.state)
			}
		})
	}
}

func TestConstraintViolated_NotFromServer(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"Nil", nil},
		{"Plain", errors.New(`duplicate key value violates unique constraint "things_code_key"`)},
		{"NoRows", pgx.ErrNoRows},
		{"Canceled", context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := postgres.ConstraintViolated(tt.err); got != "" {
				t.Errorf("ConstraintViolated = %q, want empty", got)
			}
			if got := postgres.SQLState(tt.err); got != "" {
				t.Errorf("SQLState = %q, want empty", got)
			}
		})
	}
}

// The codes are pure data; this table pins which classes count as a
// constraint violation without a server.
func TestConstraintViolated_Codes(t *testing.T) {
	tests := []struct {
		code string
		want string
	}{
		{"23505", "c"}, // unique_violation
		{"23514", "c"}, // check_violation
		{"23503", "c"}, // foreign_key_violation
		{"23P01", "c"}, // exclusion_violation
		{"23502", ""},  // not_null_violation
		{"40001", ""},  // serialization_failure
		{"40P01", ""},  // deadlock_detected
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			err := fmt.Errorf("op: %w", &pgconn.PgError{Code: tt.code, ConstraintName: "c"})
			if got := postgres.ConstraintViolated(err); got != tt.want {
				t.Errorf("ConstraintViolated(%s) = %q, want %q", tt.code, got, tt.want)
			}
			if got := postgres.SQLState(err); got != tt.code {
				t.Errorf("SQLState = %q, want %q", got, tt.code)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	ctx := context.Background()
	pool, err := postgres.Open(ctx, url, 3)
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	defer pool.Close()
	if got := pool.Config().MaxConns; got != 3 {
		t.Errorf("MaxConns = %d, want 3", got)
	}

	if _, err := postgres.Open(ctx, "postgres://shop:shop@localhost:5432/shop?sslmode=bogus", 1); err == nil {
		t.Error("Open with an unparseable URL = nil, want an error")
	}
	// Nothing listens on port 1: the ping fails and Open says so.
	if _, err := postgres.Open(ctx, "postgres://shop:shop@127.0.0.1:1/shop?sslmode=disable&connect_timeout=2", 1); err == nil ||
		!strings.Contains(err.Error(), "ping database") {
		t.Errorf("Open of an unreachable server = %v, want a ping error", err)
	}
}

// statementCounter is a pgx.QueryTracer that counts the statements it is
// told of.
type statementCounter struct {
	mu  sync.Mutex
	sql []string
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sql = append(c.sql, d.SQL)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sql)
}

// WithTracer reports every statement of the pool to the tracer, and of a
// pool SecondPool derives from it (the service's bookkeeping pool);
// without it, Open sets no tracer at all, as the service runs.
func TestOpen_WithTracer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	plain, err := postgres.Open(ctx, url, 2)
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	defer plain.Close()
	if tr := plain.Config().ConnConfig.Tracer; tr != nil {
		t.Errorf("Open without options: tracer %T, want none", tr)
	}

	var c statementCounter
	pool, err := postgres.Open(ctx, url, 2, postgres.WithTracer(&c))
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	defer pool.Close()
	async, err := postgres.SecondPool(ctx, pool, 2, true)
	if err != nil {
		t.Fatalf("SecondPool: %v", err)
	}
	defer async.Close()
	if err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := async.Exec(ctx, "SELECT 2"); err != nil {
		t.Fatal(err)
	}
	if got, want := c.seen(), []string{"begin", "SELECT 1", "commit", "SELECT 2"}; !slices.Equal(got, want) {
		t.Errorf("statements traced = %q, want %q", got, want)
	}
}

// A transaction whose process stopped between two statements (a replica
// paused, its host frozen) holds its row locks. The pool's sessions end
// such a transaction after IdleInTxTimeout: the rows are free for the
// others, its writes are rolled back, and its next statement fails with an
// error the service answers 503. With the timeout off (the row "off"),
// the writer waiting on the row waits for as long as the holder stays
// stopped: here, until its own deadline.
func TestOpen_EndsIdleTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	open := func(url string) *pgxpool.Pool {
		t.Helper()
		pool, err := postgres.Open(ctx, url, 2)
		if err != nil {
			t.Fatalf("Open = %v", err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	others := open(url)
	var setting string
	if err := others.QueryRow(ctx, "SHOW idle_in_transaction_session_timeout").Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if want := postgres.IdleInTxTimeout.String(); setting != want {
		t.Errorf("idle_in_transaction_session_timeout = %s, want %s by default", setting, want)
	}
	if _, err := others.Exec(ctx, scratchSchema+`INSERT INTO things (id) VALUES (1), (2);`); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name    string
		id      int
		timeout string // the URL's idle_in_transaction_session_timeout
		freed   bool
	}{
		{"on", 1, "300ms", true},
		{"off", 2, "0", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sep := "?"
			if strings.Contains(url, "?") {
				sep = "&"
			}
			stopped := open(url + sep + "idle_in_transaction_session_timeout=" + tt.timeout)
			tx, err := stopped.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, `UPDATE things SET code = 'stale' WHERE id = $1`, tt.id); err != nil {
				t.Fatal(err)
			}
			// The holder is now idle inside its transaction, its row locked.
			wait, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			_, err = others.Exec(wait, `UPDATE things SET qty = 1 WHERE id = $1`, tt.id)
			if !tt.freed {
				if err == nil {
					t.Fatal("the waiting writer got the row while its holder sat idle with the timeout off: this case cannot show what the timeout does")
				}
				return
			}
			if err != nil {
				t.Fatalf("the waiting writer: %v; want the row freed once its holder sat idle past the timeout", err)
			}
			_, err = tx.Exec(ctx, `UPDATE things SET qty = 2 WHERE id = $1`, tt.id)
			if err == nil || !postgres.Unavailable(err) {
				t.Errorf("the ended transaction's next statement = %v, want an error Unavailable reports", err)
			}
			var code *string
			var qty int
			if err := others.QueryRow(ctx, `SELECT code, qty FROM things WHERE id = $1`, tt.id).Scan(&code, &qty); err != nil {
				t.Fatal(err)
			}
			if code != nil || qty != 1 {
				t.Errorf("row = (%v, %d), want the stopped transaction's write rolled back and the waiter's kept: (<nil>, 1)", code, qty)
			}
		})
	}
}

func showSynchronousCommit(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var v string
	if err := pool.QueryRow(context.Background(), "SHOW synchronous_commit").Scan(&v); err != nil {
		t.Fatalf("SHOW synchronous_commit: %v", err)
	}
	return v
}

// A second pool is configured as the first; with asyncCommit it skips the
// wait for the WAL flush, and the pool it was made from keeps waiting for
// it, including on connections it opens afterwards.
func TestSecondPool(t *testing.T) {
	t.Parallel()
	pool := mustScratch(t)
	ctx := context.Background()
	durable, err := postgres.SecondPool(ctx, pool, 3, false)
	if err != nil {
		t.Fatalf("SecondPool: %v", err)
	}
	defer durable.Close()
	if got := showSynchronousCommit(t, durable); got != "on" {
		t.Errorf("second pool without asyncCommit: synchronous_commit = %s, want on", got)
	}
	if got := durable.Config().ConnConfig.ConnectTimeout; got != postgres.ConnectTimeout {
		t.Errorf("second pool: connect timeout %s, want %s as the first's", got, postgres.ConnectTimeout)
	}

	async, err := postgres.SecondPool(ctx, pool, 2, true)
	if err != nil {
		t.Fatalf("SecondPool: %v", err)
	}
	defer async.Close()
	if got := async.Config().MaxConns; got != 2 {
		t.Errorf("async MaxConns = %d, want 2", got)
	}
	if got := showSynchronousCommit(t, async); got != "off" {
		t.Errorf("async pool: synchronous_commit = %s, want off", got)
	}
	pool.Reset() // the next query opens a new connection
	if got := showSynchronousCommit(t, pool); got != "on" {
		t.Errorf("original pool: synchronous_commit = %s, want on", got)
	}

	// A commit on the async pool is at once visible to the other pool.
	if err := postgres.InTx(ctx, async, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO things (id) VALUES (1)")
		return err
	}); err != nil {
		t.Fatalf("InTx on the async pool: %v", err)
	}
	if n := countRows(t, pool, "things"); n != 1 {
		t.Errorf("things has %d rows seen from the original pool, want 1", n)
	}
}

// A URL naming two hosts reaches the one that answers: the first refuses
// every connection (a primary that died), the second is the server. Each
// host's attempt is bounded by ConnectTimeout unless the URL says
// otherwise.
func TestOpen_MultiHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dead, err := neturl.Parse(testenv.UnreachableDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	live, err := neturl.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	both := *live
	both.Host = dead.Host + "," + live.Host
	q := both.Query()
	q.Set("target_session_attrs", "read-write")
	both.RawQuery = q.Encode()
	pool, err := postgres.Open(ctx, both.String(), 2)
	if err != nil {
		t.Fatalf("Open(%s) = %v", both.Redacted(), err)
	}
	defer pool.Close()
	if got := pool.Config().ConnConfig.ConnectTimeout; got != postgres.ConnectTimeout {
		t.Errorf("connect timeout %s, want %s", got, postgres.ConnectTimeout)
	}
	if err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	}); err != nil {
		t.Errorf("a transaction through the second host: %v", err)
	}

	q.Set("connect_timeout", "7")
	both.RawQuery = q.Encode()
	own, err := postgres.Open(ctx, both.String(), 1)
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	defer own.Close()
	if got := own.Config().ConnConfig.ConnectTimeout; got != 7*time.Second {
		t.Errorf("connect_timeout=7 in the URL: %s, want 7s", got)
	}
}

// Unavailable tells "the database cannot serve now" (503, retry later)
// from every other error (a bug or a refusal): real refusals of a
// connection, and the SQLSTATEs a server answers while it cannot serve.
func TestUnavailable(t *testing.T) {
	ctx := context.Background()
	connect := func(url string) error {
		c, err := pgx.Connect(ctx, url)
		if err == nil {
			c.Close(ctx)
		}
		return err
	}
	t.Run("Refused", func(t *testing.T) {
		err := connect(testenv.UnreachableDatabaseURL(t))
		if err == nil || !postgres.Unavailable(fmt.Errorf("look up token: %w", err)) {
			t.Errorf("Unavailable(%v) = false, want true", err)
		}
	})
	t.Run("TooManyConnections", func(t *testing.T) {
		err := connect(testenv.FullDatabaseURL(t))
		if got := postgres.SQLState(err); got != "53300" {
			t.Fatalf("connect past the role's limit: %v (SQLSTATE %q), want 53300", err, got)
		}
		if !postgres.Unavailable(fmt.Errorf("look up token: %w", err)) {
			t.Errorf("Unavailable(%v) = false, want true", err)
		}
	})
	t.Run("PoolAcquire", func(t *testing.T) {
		pool, err := pgxpool.New(ctx, testenv.FullDatabaseURL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		_, err = pool.Exec(ctx, "SELECT 1")
		if !postgres.Unavailable(err) {
			t.Errorf("Unavailable(%v) = false, want true", err)
		}
	})
	t.Run("ReadOnly", func(t *testing.T) {
		// A write to a server that turned read-only (a primary being
		// demoted) is unavailability, and the pool drops the session:
		// the next connection goes to the host that accepts writes.
		pool := mustScratch(t)
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, "SET default_transaction_read_only = on"); err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, "INSERT INTO things (id) VALUES (1)")
		if got := postgres.SQLState(err); got != "25006" {
			t.Fatalf("a write on a read-only session: %v (SQLSTATE %q), want 25006", err, got)
		}
		if !postgres.Unavailable(fmt.Errorf("create order: %w", err)) {
			t.Errorf("Unavailable(%v) = false, want true", err)
		}
		if !conn.Conn().IsClosed() {
			t.Error("the read-only session is still open; the pool would hand it out again")
		}
	})
	t.Run("Terminated", func(t *testing.T) {
		pool := mustScratch(t)
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		var pid int
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, "SELECT 1")
		if !postgres.Unavailable(err) {
			t.Errorf("Unavailable(%v) = false, want true (SQLSTATE %q)", err, postgres.SQLState(err))
		}
	})
	// A connection cut under a query, with no word from the server: the
	// fault suite's PostgreSQL resets answered 500 until these counted.
	for _, cut := range []struct {
		name string
		cut  func(c net.Conn)
	}{
		{"ClosedUnderQuery", func(c net.Conn) { _ = c.Close() }},
		{"ResetUnderQuery", func(c net.Conn) {
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
		}},
	} {
		t.Run(cut.name, func(t *testing.T) {
			url, cutAll := cuttable(t, testenv.DatabaseURL(t), cut.cut)
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			err = postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
					return err
				}
				time.AfterFunc(100*time.Millisecond, cutAll)
				_, err := tx.Exec(ctx, "SELECT pg_sleep(2)")
				return err
			})
			if err == nil || !postgres.Unavailable(err) {
				t.Errorf("Unavailable(%v) = false, want true", err)
			}
			_, err = pool.Exec(ctx, "SELECT 1") // the proxy is gone: refused
			if err == nil || !postgres.Unavailable(err) {
				t.Errorf("after the cut: Unavailable(%v) = false, want true", err)
			}
		})
	}
	for _, tt := range []struct {
		code string
		want bool
	}{
		{"08000", true}, {"08003", true}, {"08006", true}, {"08001", true},
		{"53300", true}, {"57P01", true}, {"57P02", true}, {"57P03", true},
		{"25P03", true}, {"57P05", true},
		{"23505", false}, {"40001", false}, {"40P01", false}, {"22P02", false},
		{"42P01", false}, {"57014", false}, {"53100", false},
	} {
		t.Run("SQLSTATE"+tt.code, func(t *testing.T) {
			err := fmt.Errorf("query: %w", &pgconn.PgError{Code: tt.code})
			if got := postgres.Unavailable(err); got != tt.want {
				t.Errorf("Unavailable(SQLSTATE %s) = %v, want %v", tt.code, got, tt.want)
			}
		})
	}
	for _, err := range []error{nil, errors.New("boom"), context.Canceled, pgx.ErrNoRows} {
		if postgres.Unavailable(err) {
			t.Errorf("Unavailable(%v) = true, want false", err)
		}
	}
}

// cuttable returns url through a loopback forwarder and a func that cuts
// every connection through it with cut (to the client's side) and stops
// accepting.
func cuttable(t *testing.T, url string, cut func(net.Conn)) (string, func()) {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	u.Host = ln.Addr().String()
	return u.String(), func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for i, c := range conns {
			if i%2 == 0 {
				cut(c)
			} else {
				_ = c.Close()
			}
		}
	}
}

// InTxBatched: BEGIN goes with the first statements and COMMIT with the
// last ones; what fn returns is committed, and the connection goes back
// to the pool clean, not thrown away as one left inside a transaction.
func TestInTxBatched_Commit(t *testing.T) {
	t.Parallel()
	pool := mustScratch(t)
	ctx := context.Background()
	var firstID, pid uint32
	err := postgres.InTxBatched(ctx, pool, func(b *pgx.Batch) {
		b.Queue("INSERT INTO things (id) VALUES (1) RETURNING id").QueryRow(func(row pgx.Row) error {
			return row.Scan(&firstID)
		})
	}, func(tx pgx.Tx) (*pgx.Batch, error) {
		pid = tx.Conn().PgConn().PID()
		if _, err := tx.Exec(ctx, "INSERT INTO things (id) VALUES ($1 + 1)", firstID); err != nil {
			return nil, err
		}
		last := &pgx.Batch{}
		last.Queue("INSERT INTO things (id) VALUES (3)")
		return last, nil
	})
	if err != nil {
		t.Fatalf("InTxBatched = %v", err)
	}
	if n := countRows(t, pool, "things"); n != 3 {
		t.Errorf("things has %d rows, want 3 committed", n)
	}
	var next uint32
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&next); err != nil || next != pid {
		t.Errorf("next query ran on backend %d (%v), want the transaction's %d back in the pool", next, err, pid)
	}
	assertReleased(t, pool)
}

// Every way the batched transaction can fail leaves no row and frees the
// connection: an error of the first statements (fn does not run), of fn,
// of the last batch, a COMMIT that the server turns into ROLLBACK, and a
// panic.
func TestInTxBatched_RollsBack(t *testing.T) {
	t.Parallel()
	errRefused := errors.New("refused")
	insert := func(b *pgx.Batch) { b.Queue("INSERT INTO things (id) VALUES (1)") }
	for _, tt := range []struct {
		name  string
		first func(*pgx.Batch)
		fn    func(tx pgx.Tx) (*pgx.Batch, error)
		want  func(error) bool
	}{
		{"FirstFails", func(b *pgx.Batch) {
			insert(b)
			b.Queue("SELECT 1").QueryRow(func(pgx.Row) error { return errRefused })
		}, func(pgx.Tx) (*pgx.Batch, error) {
			t.Error("fn ran after its first statements failed")
			return nil, nil
		}, func(err error) bool { return errors.Is(err, errRefused) }},
		{"FnFails", insert, func(pgx.Tx) (*pgx.Batch, error) { return nil, errRefused },
			func(err error) bool { return errors.Is(err, errRefused) }},
		{"LastFails", insert, func(pgx.Tx) (*pgx.Batch, error) {
			last := &pgx.Batch{}
			last.Queue("INSERT INTO things (id, qty) VALUES (2, -1)")
			return last, nil
		}, func(err error) bool { return postgres.ConstraintViolated(err) == "things_qty_nonnegative" }},
		{"CommitFails", insert, func(pgx.Tx) (*pgx.Batch, error) {
			last := &pgx.Batch{}
			last.Queue("INSERT INTO deferred (id) VALUES (1), (1)")
			return last, nil
		}, func(err error) bool { return postgres.ConstraintViolated(err) == "deferred_id_key" }},
		{"CommitOfAbortedTransaction", insert, func(tx pgx.Tx) (*pgx.Batch, error) {
			_, _ = tx.Exec(context.Background(), "INSERT INTO things (id, qty) VALUES (2, -1)") // error ignored on purpose
			return &pgx.Batch{}, nil
		}, func(err error) bool { return errors.Is(err, pgx.ErrTxCommitRollback) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := mustScratch(t)
			err := postgres.InTxBatched(context.Background(), pool, tt.first, tt.fn)
			if !tt.want(err) {
				t.Errorf("InTxBatched = %v", err)
			}
			if n := countRows(t, pool, "things") + countRows(t, pool, "deferred"); n != 0 {
				t.Errorf("%d rows after a failed transaction, want 0", n)
			}
			assertReleased(t, pool)
		})
	}
	t.Run("Panic", func(t *testing.T) {
		t.Parallel()
		pool := mustScratch(t)
		var recovered any
		func() {
			defer func() { recovered = recover() }()
			_ = postgres.InTxBatched(context.Background(), pool, insert, func(pgx.Tx) (*pgx.Batch, error) { panic("mid-transaction") })
		}()
		if recovered != "mid-transaction" {
			t.Fatalf("recovered %v, want the panic re-raised", recovered)
		}
		if n := countRows(t, pool, "things"); n != 0 {
			t.Errorf("things has %d rows after a panic, want 0", n)
		}
		assertReleased(t, pool)
	})
}

// InTxFirst: the first statements go with BEGIN, fn continues, and the
// commit is InTx's; an error of the first statements stops fn.
func TestInTxFirst(t *testing.T) {
	t.Parallel()
	pool := mustScratch(t)
	ctx := context.Background()
	err := postgres.InTxFirst(ctx, pool, func(b *pgx.Batch) {
		b.Queue("INSERT INTO things (id) VALUES (1)")
	}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO things (id) VALUES (2)")
		return err
	})
	if err != nil || countRows(t, pool, "things") != 2 {
		t.Fatalf("InTxFirst = %v with %d rows, want nil and 2", err, countRows(t, pool, "things"))
	}
	err = postgres.InTxFirst(ctx, pool, func(b *pgx.Batch) {
		b.Queue("INSERT INTO things (id) VALUES (3)")
		b.Queue("INSERT INTO things (id) VALUES (1)")
	}, func(pgx.Tx) error {
		t.Error("fn ran after its first statements failed")
		return nil
	})
	if postgres.ConstraintViolated(err) != "things_pkey" || countRows(t, pool, "things") != 2 {
		t.Fatalf("InTxFirst = %v with %d rows, want things_pkey and 2", err, countRows(t, pool, "things"))
	}
	assertReleased(t, pool)
}
