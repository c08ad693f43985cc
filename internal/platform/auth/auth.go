// Package auth knows who is calling: users and their bearer tokens, the
// admin token, and the middleware that puts a Principal on the request.
//
// Tokens are 256 random bits, shown once at registration; only their
// SHA-256 is stored. A slow password hash would add nothing against guessing
// a 256-bit value and would cost every request a few milliseconds.
package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/problem"
)

// AdminScope is the idempotency scope of requests made with the admin token.
const AdminScope = "admin"

// Principal is the caller of a request.
type Principal struct {
	UserID string // empty for the admin
	Name   string
	Admin  bool
}

// Scope is what idempotency keys and ownership are scoped to.
func (p Principal) Scope() string {
	if p.Admin {
		return AdminScope
	}
	return p.UserID
}

// User is a registered user.
type User struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// ErrUnauthenticated is returned for a missing, malformed or unknown token.
var ErrUnauthenticated = problem.New(problem.Unauthenticated, "missing or invalid bearer token")

type principalKey struct{}

// WithPrincipal returns a context carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the caller put on ctx by the auth middleware.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// ValidateName checks a user name: 1–100 characters, no control characters.
func ValidateName(name string) error {
	n := utf8.RuneCountInString(name)
	if n < 1 || n > 100 || strings.TrimSpace(name) == "" {
		return problem.New(problem.Invalid, "name: must be 1–100 characters")
	}
	if !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return problem.New(problem.Invalid, "name: must not contain control characters")
	}
	return nil
}

// Store keeps users and token hashes in PostgreSQL.
type Store struct {
	db     *pgxpool.Pool
	now    func() time.Time
	tokens *tokenCache
}

// NewStore returns a store over db.
func NewStore(db *pgxpool.Pool) *Store {
	s := &Store{db: db, now: time.Now}
	s.tokens = newTokenCache(s.now)
	return s
}

const (
	sqlInsertUser  = `INSERT INTO users (id, name, token_hash, created_at) VALUES ($1, $2, $3, $4)`
	sqlUserByToken = `SELECT id, name, created_at FROM users WHERE token_hash = $1`
	sqlPutUser     = `INSERT INTO users (id, name, token_hash, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, token_hash = EXCLUDED.token_hash
		RETURNING created_at`
)

// DemoUserID is the id of the demo user `shop seed` adds with SHOP_DEMO.
var DemoUserID = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://shop.example/users/demo")).String()

// DemoToken is the demo user's token: an HMAC of a fixed label under the
// admin token. Every run of `shop seed` prints the same token without
// storing it, and nobody without the admin token can work it out.
func DemoToken(adminToken string) string {
	mac := hmac.New(sha256.New, []byte(adminToken))
	mac.Write([]byte("shop demo user"))
	return "shop_" + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// PutUser creates the user with this id and token, or gives the existing
// one this name and token (the old token stops working). It is for users
// whose token is known in advance, such as the demo user.
func (s *Store) PutUser(ctx context.Context, id, name, token string) (User, error) {
	if err := ValidateName(name); err != nil {
		return User{}, err
	}
	u := User{ID: id, Name: name}
	hash := hashToken(token)
	err := s.db.QueryRow(ctx, sqlPutUser, id, name, hash[:], s.now().UTC().Truncate(time.Microsecond)).Scan(&u.CreatedAt)
	if err != nil {
		return User{}, fmt.Errorf("put user: %w", err)
	}
	return u, nil
}

// CreateUser registers a user and returns it with its token, which is not
// stored and cannot be shown again.
func (s *Store) CreateUser(ctx context.Context, name string) (User, string, error) {
	if err := ValidateName(name); err != nil {
		return User{}, "", err
	}
	token, err := newToken()
	if err != nil {
		return User{}, "", err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return User{}, "", fmt.Errorf("new user id: %w", err)
	}
	u := User{ID: id.String(), Name: name, CreatedAt: s.now().UTC().Truncate(time.Microsecond)}
	hash := hashToken(token)
	if _, err := s.db.Exec(ctx, sqlInsertUser, u.ID, u.Name, hash[:], u.CreatedAt); err != nil {
		return User{}, "", fmt.Errorf("insert user: %w", err)
	}
	return u, token, nil
}

// UserByToken returns the user a token belongs to.
func (s *Store) UserByToken(ctx context.Context, token string) (User, error) {
	hash := hashToken(token)
	if u, ok := s.tokens.get(hash); ok {
		return u, nil
	}
	var u User
	err := s.db.QueryRow(ctx, sqlUserByToken, hash[:]).Scan(&u.ID, &u.Name, &u.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return User{}, ErrUnauthenticated
	}
	if err != nil {
		return User{}, fmt.Errorf("look up token: %w", err)
	}
	s.tokens.put(hash, u)
	return u, nil
}

func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return "shop_" + base64.RawURLEncoding.EncodeToString(b), nil
}

func hashToken(token string) [32]byte {
	return sha256.Sum256([]byte(token))
}

// equalTokens compares in constant time, so response timing does not leak
// how much of the admin token a guess got right.
func equalTokens(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}
