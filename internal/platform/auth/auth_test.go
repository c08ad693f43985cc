package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/problem"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestValidateName(t *testing.T) {
	tests := []struct {
		name  string
		input string
		ok    bool
	}{
		{"Empty", "", false},
		{"OneChar", "a", true},
		{"SpacesOnly", "   ", false},
		{"TabsAndSpaces", " \t ", false},
		{"Max", strings.Repeat("a", 100), true},
		{"OverMax", strings.Repeat("a", 101), false},
		{"MaxMultibyte", strings.Repeat("é", 100), true}, // 200 bytes, 100 characters
		{"OverMaxMultibyte", strings.Repeat("é", 101), false},
		{"Unicode", "Zoë 山田 🚀", true},
		{"InnerSpace", "alice smith", true},
		{"Newline", "alice\nadmin", false},
		{"Tab", "alice\tbob", false},
		{"NUL", "alice\x00", false},
		{"Escape", "\x1b[31malice", false},
		{"DEL", "alice\x7f", false},
		{"C1Control", "alice\u0085", false},
		{"InvalidUTF8", "alice\xff", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateName(tt.input)
			if tt.ok {
				if err != nil {
					t.Errorf("ValidateName(%q) = %v, want nil", tt.input, err)
				}
				return
			}
			if problem.CodeOf(err) != problem.Invalid {
				t.Fatalf("ValidateName(%q) = %v, want invalid_request", tt.input, err)
			}
			if p, _ := problem.As(err); !strings.HasPrefix(p.Detail, "name: ") {
				t.Errorf("detail = %q, want it to name the field", p.Detail)
			}
		})
	}
}

func TestPrincipal_Scope(t *testing.T) {
	tests := []struct {
		name string
		p    Principal
		want string
	}{
		{"User", Principal{UserID: "0190a0b0-0000-7000-8000-000000000001", Name: "alice"}, "0190a0b0-0000-7000-8000-000000000001"},
		{"Admin", Principal{Name: "root", Admin: true}, AdminScope},
		// A user who calls themselves "admin" does not share the admin's keys.
		{"UserNamedAdmin", Principal{UserID: "u-1", Name: "admin"}, "u-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Scope(); got != tt.want {
				t.Errorf("Scope() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPrincipalFrom(t *testing.T) {
	if _, ok := PrincipalFrom(context.Background()); ok {
		t.Error("PrincipalFrom(empty ctx) ok = true, want false")
	}
	want := Principal{UserID: "u-1", Name: "alice"}
	got, ok := PrincipalFrom(WithPrincipal(context.Background(), want))
	if !ok || got != want {
		t.Errorf("PrincipalFrom = %+v, %v; want %+v, true", got, ok, want)
	}
}

func TestEqualTokens(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"shop_admin", "shop_admin", true},
		{"shop_admin", "shop_admi", false},
		{"shop_admin", "shop_admin2", false},
		{"shop_admin", "SHOP_ADMIN", false},
		{"", "", true},
		{"a", "", false},
	}
	for _, tt := range tests {
		if got := equalTokens(tt.a, tt.b); got != tt.want {
			t.Errorf("equalTokens(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		tok, err := newToken()
		if err != nil {
			t.Fatal(err)
		}
		// "shop_" and 32 random bytes in unpadded base64url.
		if !strings.HasPrefix(tok, "shop_") || len(tok) != len("shop_")+43 {
			t.Fatalf("token %q: want shop_ and 43 base64url characters", tok)
		}
		if seen[tok] {
			t.Fatalf("token %q generated twice", tok)
		}
		seen[tok] = true
	}
}

// mustCreateUser registers a user and returns it with its token.
func mustCreateUser(t *testing.T, s *Store, name string) (User, string) {
	t.Helper()
	u, token, err := s.CreateUser(context.Background(), name)
	if err != nil {
		t.Fatalf("CreateUser(%q): %v", name, err)
	}
	return u, token
}

func TestStore_CreateUser(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	s := NewStore(pool)
	fixed := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))
	s.now = func() time.Time { return fixed }
	ctx := context.Background()

	u, token := mustCreateUser(t, s, "alice")
	if !strings.HasPrefix(token, "shop_") {
		t.Errorf("token = %q, want the shop_ prefix", token)
	}
	if u.Name != "alice" || u.ID == "" {
		t.Errorf("user = %+v, want a new id and name alice", u)
	}
	if want := fixed.UTC().Truncate(time.Microsecond); !u.CreatedAt.Equal(want) || u.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt = %v, want %v in UTC", u.CreatedAt, want)
	}

	// The row holds the token's SHA-256 and nothing from which the token
	// could be read back.
	var row string
	var stored []byte
	err := pool.QueryRow(ctx, "SELECT row_to_json(users)::text, token_hash FROM users WHERE id = $1", u.ID).Scan(&row, &stored)
	if err != nil {
		t.Fatalf("read row: %v", err)
	}
	if sum := sha256.Sum256([]byte(token)); string(stored) != string(sum[:]) {
		t.Errorf("token_hash = %x, want sha256(token) = %x", stored, sum)
	}
	secret := strings.TrimPrefix(token, "shop_")
	if strings.Contains(row, secret) {
		t.Errorf("row %s contains the token", row)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM users WHERE position($1 in row_to_json(users)::text) > 0", secret).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d rows of users contain the token text", n)
	}

	got, err := s.UserByToken(ctx, token)
	if err != nil {
		t.Fatalf("UserByToken: %v", err)
	}
	if got.ID != u.ID || got.Name != u.Name || !got.CreatedAt.Equal(u.CreatedAt) {
		t.Errorf("UserByToken = %+v, want %+v", got, u)
	}

	// Two users with the same name are two users with two tokens.
	u2, token2 := mustCreateUser(t, s, "alice")
	if u2.ID == u.ID || token2 == token {
		t.Errorf("second alice got id %s token %s, want both new", u2.ID, token2)
	}
}

func TestStore_CreateUser_InvalidName(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	s := NewStore(pool)
	for _, name := range []string{"", "   ", strings.Repeat("x", 101), "a\nb"} {
		_, token, err := s.CreateUser(context.Background(), name)
		if problem.CodeOf(err) != problem.Invalid || token != "" {
			t.Errorf("CreateUser(%q) = %q, %v; want no token and invalid_request", name, token, err)
		}
	}
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM users").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("users has %d rows after refused names, want 0", n)
	}
}

func TestStore_UserByToken_Unknown(t *testing.T) {
	t.Parallel()
	s := NewStore(testenv.Pool(t))
	_, token := mustCreateUser(t, s, "alice")
	for _, tok := range []string{
		"shop_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		token[:len(token)-1], // a prefix of a real token
		token + "x",
		strings.ToUpper(token),
		"",
	} {
		_, err := s.UserByToken(context.Background(), tok)
		if !errors.Is(err, ErrUnauthenticated) || problem.CodeOf(err) != problem.Unauthenticated {
			t.Errorf("UserByToken(%q) = %v, want ErrUnauthenticated", tok, err)
		}
	}
}

func TestStore_UserByToken_DatabaseDown(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	s := NewStore(pool)
	_, token := mustCreateUser(t, s, "alice")
	pool.Close()
	_, err := s.UserByToken(context.Background(), token)
	if err == nil || errors.Is(err, ErrUnauthenticated) {
		t.Errorf("UserByToken with the pool closed = %v, want an internal error, not 401", err)
	}
}

// A token looked up once is remembered (the cache is wired in), and an
// unknown token is not: it goes to the database every time.
func TestStore_UserByToken_Cache(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	s := NewStore(pool)
	u, token := mustCreateUser(t, s, "alice")
	if _, err := s.UserByToken(context.Background(), token); err != nil {
		t.Fatalf("UserByToken: %v", err)
	}
	const unknown = "shop_unknownunknownunknownunknownunknownunk"
	if _, err := s.UserByToken(context.Background(), unknown); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("UserByToken(unknown) = %v, want ErrUnauthenticated", err)
	}
	pool.Close()

	got, err := s.UserByToken(context.Background(), token)
	if err != nil || got.ID != u.ID || got.Name != u.Name || !got.CreatedAt.Equal(u.CreatedAt) {
		t.Errorf("UserByToken of a known token with the database down = %+v, %v; want %+v from the cache", got, err, u)
	}
	if _, err := s.UserByToken(context.Background(), unknown); err == nil || errors.Is(err, ErrUnauthenticated) {
		t.Errorf("UserByToken(unknown) with the database down = %v, want a database error (unknown tokens are not cached)", err)
	}
}

// The demo user's token is the same on every run from one admin token, it
// authenticates, and another admin token replaces it.
func TestPutUser_DemoToken(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	s := NewStore(pool)

	first := DemoToken("admin-dev-token")
	if first != DemoToken("admin-dev-token") || !strings.HasPrefix(first, "shop_") {
		t.Fatalf("DemoToken = %q, not stable or not a shop token", first)
	}
	for range 2 { // seeding again changes nothing
		if _, err := s.PutUser(ctx, DemoUserID, "demo", first); err != nil {
			t.Fatalf("PutUser: %v", err)
		}
	}
	u, err := s.UserByToken(ctx, first)
	if err != nil || u.ID != DemoUserID || u.Name != "demo" {
		t.Fatalf("UserByToken(demo) = %+v, %v; want the demo user", u, err)
	}

	second := DemoToken("another-admin-token")
	if second == first {
		t.Fatal("two admin tokens give one demo token")
	}
	if _, err := s.PutUser(ctx, DemoUserID, "demo", second); err != nil {
		t.Fatalf("PutUser: %v", err)
	}
	fresh := NewStore(pool) // no cached token
	if _, err := fresh.UserByToken(ctx, first); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("old demo token: %v, want ErrUnauthenticated", err)
	}
	if u, err := fresh.UserByToken(ctx, second); err != nil || u.ID != DemoUserID {
		t.Errorf("new demo token: %+v, %v", u, err)
	}
	if _, err := s.PutUser(ctx, DemoUserID, "", second); problem.CodeOf(err) != problem.Invalid {
		t.Errorf("PutUser with an empty name = %v, want invalid_request", err)
	}
}
