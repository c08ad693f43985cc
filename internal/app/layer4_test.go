package app_test

import (
	"context"
	"testing"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/app"
)

// TestLayer4_CataloguesMatchTheSchema checks every flow's catalogue of
// its constraints against the migrated schema: each one exists, on its
// table, as the kind the catalogue says, so that what the race lab and
// the ablation tests drop is what layer 4 is.
func TestLayer4_CataloguesMatchTheSchema(t *testing.T) {
	db := testenv.Pool(t)
	ctx := context.Background()
	seen := map[string]bool{}
	for _, c := range app.Layer4 {
		if seen[c.Name] {
			t.Errorf("%s is in two catalogues", c.Name)
		}
		seen[c.Name] = true
		var table string
		var err error
		if c.Index {
			err = db.QueryRow(ctx, `SELECT i.tablename FROM pg_indexes i
				JOIN pg_class x ON x.relname = i.indexname JOIN pg_index ix ON ix.indexrelid = x.oid
				WHERE i.schemaname = current_schema() AND i.indexname = $1 AND ix.indisunique
				AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conname = i.indexname)`, c.Name).Scan(&table)
		} else {
			err = db.QueryRow(ctx, `SELECT r.relname FROM pg_constraint k JOIN pg_class r ON r.oid = k.conrelid
				WHERE k.conname = $1 AND k.contype IN ('u', 'c', 'p')
				AND r.relnamespace = current_schema()::regnamespace`, c.Name).Scan(&table)
		}
		switch {
		case err != nil:
			t.Errorf("%s (index %v): not in the schema: %v", c.Name, c.Index, err)
		case table != c.Table:
			t.Errorf("%s: on table %s, the catalogue says %s", c.Name, table, c.Table)
		}
	}
	if len(seen) < 9 {
		t.Errorf("the catalogues list %d constraints; layer 4 of the four flows has at least 9", len(seen))
	}
}
