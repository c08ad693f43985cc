package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// User is a registered user as POST /v1/users answers it: its token works
// on every route that takes a bearer token.
type User struct {
	ID    string
	Name  string
	Token string
}

// Users registers n users straight in the database, in one statement, as
// POST /v1/users would (the token stored as its SHA-256): the fixture of
// every race that needs many buyers.
func Users(t testing.TB, db *pgxpool.Pool, n int) []User {
	t.Helper()
	users := make([]User, n)
	names, hashes := make([]string, n), make([][]byte, n)
	for i := range users {
		token := "shop_" + rand.Text()
		sum := sha256.Sum256([]byte(token))
		users[i] = User{Name: fmt.Sprintf("user-%d", i), Token: token}
		names[i], hashes[i] = users[i].Name, sum[:]
	}
	rows, err := db.Query(context.Background(), `INSERT INTO users (id, name, token_hash, created_at)
		SELECT gen_random_uuid(), u.name, u.hash, now() FROM unnest($1::text[], $2::bytea[]) AS u (name, hash)
		RETURNING id::text, name`, names, hashes)
	if err != nil {
		t.Fatalf("create users: %v", err)
	}
	defer rows.Close()
	ids := make(map[string]string, n)
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			t.Fatalf("create users: %v", err)
		}
		ids[name] = id
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("create users: %v", err)
	}
	for i := range users {
		users[i].ID = ids[users[i].Name]
	}
	return users
}
