package postgres_test

import (
	"context"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/migrations"
)

// lastMigration is the version of the newest embedded migration, read from
// the file names so the test follows new migrations without edits.
func lastMigration(t *testing.T) uint {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no embedded migrations (%v)", err)
	}
	var last uint
	for _, n := range names {
		num, _, _ := strings.Cut(n, "_")
		v, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			t.Fatalf("migration %s: %v", n, err)
		}
		last = max(last, uint(v))
	}
	return last
}

func mustMigrator(t *testing.T, url string) *postgres.Migrator {
	t.Helper()
	m, err := postgres.NewMigrator(url)
	if err != nil {
		t.Fatalf("NewMigrator: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

func assertVersion(t *testing.T, m *postgres.Migrator, want uint) {
	t.Helper()
	v, dirty, err := m.Version()
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	if v != want || dirty {
		t.Errorf("Version = %d dirty=%v, want %d dirty=false", v, dirty, want)
	}
}

// tableExists reports whether the users table (from the first migration) is
// in the database.
func tableExists(t *testing.T, url, table string) bool {
	t.Helper()
	pool := testenv.PoolFor(t, url)
	var exists bool
	err := pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists)
	if err != nil {
		t.Fatalf("look up %s: %v", table, err)
	}
	return exists
}

func TestMigrator_RoundTrip(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t) // already migrated
	last := lastMigration(t)
	m := mustMigrator(t, url)

	assertVersion(t, m, last)
	if err := m.Up(); err != nil {
		t.Fatalf("Up on an up-to-date database = %v, want nil (no change is not an error)", err)
	}
	assertVersion(t, m, last)

	if err := m.Down(); err != nil {
		t.Fatalf("Down: %v", err)
	}
	assertVersion(t, m, 0)
	if tableExists(t, url, "users") {
		t.Error("users still exists after Down")
	}
	if err := m.Down(); err != nil {
		t.Fatalf("Down on an empty database = %v, want nil", err)
	}

	if err := m.Up(); err != nil {
		t.Fatalf("Up: %v", err)
	}
	assertVersion(t, m, last)
	if !tableExists(t, url, "users") {
		t.Error("users missing after Up")
	}
}

// Replicas starting together all run the migrations; the advisory lock
// makes that safe, and each sees success.
func TestMigrateUp_Concurrent(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	if err := mustMigrator(t, url).Down(); err != nil {
		t.Fatalf("Down: %v", err)
	}
	const replicas = 4
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() { errs[i] = postgres.MigrateUp(url) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: MigrateUp = %v", i, err)
		}
	}
	assertVersion(t, mustMigrator(t, url), lastMigration(t))
}

// Both spellings of the scheme that SHOP_DATABASE_URL accepts reach the
// migrator's driver.
func TestNewMigrator_Schemes(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	rest, ok := strings.CutPrefix(url, "postgres://")
	if !ok {
		t.Skipf("test database URL %q is not postgres://", url)
	}
	for _, u := range []string{url, "postgresql://" + rest} {
		assertVersion(t, mustMigrator(t, u), lastMigration(t))
	}
	if _, err := postgres.NewMigrator("mysql://" + rest); err == nil {
		t.Error("NewMigrator(mysql://) = nil, want an error")
	}
}
