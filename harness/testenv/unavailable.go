package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
)

// UnreachableDatabaseURL returns the URL of the test's database with the
// server's port swapped for a local port nothing listens on: every
// connection is refused.
func UnreachableDatabaseURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	u, err := url.Parse(DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// FullDatabaseURL returns a URL of the test's database for a role allowed
// one connection, which the test already holds until it ends: the server
// refuses every connection made with the URL with SQLSTATE 53300 (too many
// connections), as it does when max_connections is reached. The role is
// dropped when the test ends.
func FullDatabaseURL(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	dbURL := DatabaseURL(t)
	role, password := "shop_full_"+randomHex(6), randomHex(16)
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect to test database: %v", err)
	}
	defer admin.Close(ctx)
	create := fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s' CONNECTION LIMIT 1", role, password)
	if _, err := admin.Exec(ctx, create); err != nil {
		t.Fatalf("create role: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dbURL)
		if err != nil {
			t.Logf("drop role %s: %v", role, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP ROLE IF EXISTS "+role); err != nil {
			t.Logf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	held, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	// Registered after the role's cleanup, so it runs before it.
	t.Cleanup(func() { held.Close(context.Background()) })
	return u.String()
}
