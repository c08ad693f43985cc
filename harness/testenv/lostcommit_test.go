package testenv_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// Through a CommitCutter, the armed commit is carried out and its answer
// lost: the client's commit fails, the row is there; inside a transaction
// block and for a statement that commits itself. Unarmed, everything goes
// through.
func TestCommitCutter_LosesOneCommitAnswer(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	cutter := testenv.NewCommitCutter(t)
	through := testenv.PoolFor(t, cutter.URL(dbURL))
	direct := testenv.PoolFor(t, dbURL)
	if _, err := direct.Exec(ctx, `CREATE TABLE cut (n int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	count := func(n int) int {
		var c int
		if err := direct.QueryRow(ctx, `SELECT count(*) FROM cut WHERE n = $1`, n).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	insertTx := func(n int) error {
		return postgres.InTx(ctx, through, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO cut (n) VALUES ($1)`, n)
			return err
		})
	}

	if err := insertTx(1); err != nil || count(1) != 1 {
		t.Fatalf("unarmed: insert = %v, %d rows; want nil and 1", err, count(1))
	}
	cutter.LoseCommitOf("INSERT INTO cut")
	if err := insertTx(2); err == nil || !postgres.Unavailable(err) {
		t.Fatalf("armed, in a transaction: insert = %v, want the connection cut", err)
	}
	if count(2) != 1 || cutter.Lost() != 1 {
		t.Fatalf("armed, in a transaction: %d rows and %d answers lost, want the commit done and 1 lost", count(2), cutter.Lost())
	}
	cutter.LoseCommitOf("INSERT INTO cut")
	if _, err := through.Exec(ctx, `INSERT INTO cut (n) VALUES ($1)`, 3); err == nil || !postgres.Unavailable(err) {
		t.Fatalf("armed, a statement on its own: insert = %v, want the connection cut", err)
	}
	if count(3) != 1 || cutter.Lost() != 2 {
		t.Fatalf("armed, a statement on its own: %d rows and %d answers lost, want it done and 2 lost", count(3), cutter.Lost())
	}
	if err := insertTx(4); err != nil || count(4) != 1 || cutter.Lost() != 2 {
		t.Fatalf("disarmed again: insert = %v, %d rows, %d lost; want nil, 1 and 2", err, count(4), cutter.Lost())
	}
	// The statement sent with BEGIN in one batch, COMMIT with the last:
	// it is inside the transaction, and the COMMIT's answer is the one lost.
	cutter.LoseCommitOf("INSERT INTO cut")
	err := postgres.InTxBatched(ctx, through, func(b *pgx.Batch) {
		b.Queue(`INSERT INTO cut (n) VALUES (5)`)
	}, func(pgx.Tx) (*pgx.Batch, error) {
		last := &pgx.Batch{}
		last.Queue(`INSERT INTO cut (n) VALUES (6)`)
		return last, nil
	})
	if err == nil || !postgres.Unavailable(err) || count(5) != 1 || count(6) != 1 || cutter.Lost() != 3 {
		t.Fatalf("armed, batched: insert = %v, rows %d and %d, %d lost; want the connection cut after both committed and 3 lost",
			err, count(5), count(6), cutter.Lost())
	}
}
