package auth

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/metrics"
)

const testAdminToken = "adm_0123456789abcdef"

// server is the shared HTTP edge with the auth routes, and two probe routes
// that answer with the principal the middleware put on the context.
type server struct {
	e     *echo.Echo
	store *Store
}

func newServer(t *testing.T, adminToken string) *server {
	t.Helper()
	store := NewStore(testenv.Pool(t))
	mw := NewMiddleware(store, adminToken)
	e := httpx.New(metrics.New(), httpx.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	v1 := e.Group("/v1")
	// No registration limit here: it is package ratelimit's (which
	// imports this one), tested with the routes in internal/app.
	unlimited := func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	Register(v1, store, mw, unlimited)
	probe := func(c echo.Context) error {
		p, ok := PrincipalFrom(c.Request().Context())
		if !ok {
			return c.String(http.StatusTeapot, "no principal")
		}
		return c.JSON(http.StatusOK, map[string]any{"user_id": p.UserID, "name": p.Name, "admin": p.Admin, "scope": p.Scope()})
	}
	v1.GET("/probe/user", probe, mw.User)
	v1.GET("/probe/admin", probe, mw.Admin)
	v1.GET("/probe/either", probe, mw.UserOrAdmin)
	return &server{e: e, store: store}
}

type response struct {
	status int
	body   map[string]any
	raw    string
}

func (s *server) do(t *testing.T, method, path, authorization, body string) response {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if authorization != "" {
		req.Header.Set(echo.HeaderAuthorization, authorization)
	}
	if body != "" {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	rec := httptest.NewRecorder()
	s.e.ServeHTTP(rec, req)
	r := response{status: rec.Code, raw: rec.Body.String()}
	_ = json.Unmarshal(rec.Body.Bytes(), &r.body)
	return r
}

// wantProblem checks the status and the problem code.
func wantProblem(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status || r.body["code"] != code {
		t.Errorf("got %d %s, want %d with code %s", r.status, r.raw, status, code)
	}
}

func TestMiddleware_User(t *testing.T) {
	t.Parallel()
	s := newServer(t, testAdminToken)
	u, token := mustCreateUser(t, s.store, "alice")

	tests := []struct {
		name, authorization string
	}{
		{"NoHeader", ""},
		{"Basic", "Basic x"},
		{"BasicWithToken", "Basic " + token},
		{"BearerEmpty", "Bearer "},
		{"BearerSpaces", "Bearer    "},
		{"BearerOnly", "Bearer"},
		{"NoScheme", token},
		{"Unknown", "Bearer shop_unknownunknownunknownunknownunknownunk"},
		{"TokenPrefix", "Bearer " + token[:len(token)-1]},
		{"TokenTooLong", "Bearer " + token + strings.Repeat("a", 300)},
		{"AdminTokenIsNotAUser", "Bearer " + testAdminToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantProblem(t, s.do(t, http.MethodGet, "/v1/probe/user", tt.authorization, ""), 401, "unauthenticated")
		})
	}

	for _, authz := range []string{"Bearer " + token, "bearer " + token, "BEARER  " + token + " "} {
		t.Run("Valid/"+strings.Fields(authz)[0], func(t *testing.T) {
			r := s.do(t, http.MethodGet, "/v1/probe/user", authz, "")
			if r.status != http.StatusOK {
				t.Fatalf("got %d %s, want 200", r.status, r.raw)
			}
			if r.body["user_id"] != u.ID || r.body["name"] != "alice" || r.body["admin"] != false || r.body["scope"] != u.ID {
				t.Errorf("principal = %v, want alice (%s), not admin, scoped to her id", r.body, u.ID)
			}
		})
	}
}

func TestMiddleware_Admin(t *testing.T) {
	t.Parallel()
	s := newServer(t, testAdminToken)
	_, userToken := mustCreateUser(t, s.store, "alice")

	t.Run("AdminToken", func(t *testing.T) {
		r := s.do(t, http.MethodGet, "/v1/probe/admin", "Bearer "+testAdminToken, "")
		if r.status != http.StatusOK {
			t.Fatalf("got %d %s, want 200", r.status, r.raw)
		}
		if r.body["admin"] != true || r.body["scope"] != "admin" || r.body["user_id"] != "" {
			t.Errorf("principal = %v, want the admin scoped to admin", r.body)
		}
	})
	t.Run("UserToken", func(t *testing.T) {
		wantProblem(t, s.do(t, http.MethodGet, "/v1/probe/admin", "Bearer "+userToken, ""), 403, "forbidden")
	})
	tests := []struct {
		name, authorization string
	}{
		{"NoHeader", ""},
		{"Basic", "Basic " + testAdminToken},
		{"BearerEmpty", "Bearer "},
		{"Unknown", "Bearer nope"},
		// The comparison is by the whole value.
		{"PrefixOfAdminToken", "Bearer " + testAdminToken[:len(testAdminToken)-1]},
		{"AdminTokenPlusSuffix", "Bearer " + testAdminToken + "0"},
		{"AdminTokenOtherCase", "Bearer " + strings.ToUpper(testAdminToken)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantProblem(t, s.do(t, http.MethodGet, "/v1/probe/admin", tt.authorization, ""), 401, "unauthenticated")
		})
	}
}

// A route an order's owner and the operator both use admits a user's
// token as the user and the admin token as the admin; anything else is
// 401, and with no admin token configured the admin token is nobody's.
func TestMiddleware_UserOrAdmin(t *testing.T) {
	t.Parallel()
	s := newServer(t, testAdminToken)
	u, userToken := mustCreateUser(t, s.store, "alice")
	if r := s.do(t, http.MethodGet, "/v1/probe/either", "Bearer "+userToken, ""); r.status != http.StatusOK ||
		r.body["user_id"] != u.ID || r.body["admin"] != false {
		t.Errorf("user token: %d %s, want alice", r.status, r.raw)
	}
	if r := s.do(t, http.MethodGet, "/v1/probe/either", "Bearer "+testAdminToken, ""); r.status != http.StatusOK ||
		r.body["admin"] != true || r.body["scope"] != "admin" {
		t.Errorf("admin token: %d %s, want the admin", r.status, r.raw)
	}
	for _, authz := range []string{"", "Bearer nope", "Bearer " + testAdminToken + "0"} {
		wantProblem(t, s.do(t, http.MethodGet, "/v1/probe/either", authz, ""), 401, "unauthenticated")
	}
	off := newServer(t, "")
	wantProblem(t, off.do(t, http.MethodGet, "/v1/probe/either", "Bearer ", ""), 401, "unauthenticated")
	wantProblem(t, off.do(t, http.MethodGet, "/v1/probe/either", "Bearer "+testAdminToken, ""), 401, "unauthenticated")
}

// With SHOP_ADMIN_TOKEN unset the admin routes are off for everyone, and
// an empty bearer token does not match the empty admin token.
func TestMiddleware_AdminDisabled(t *testing.T) {
	t.Parallel()
	s := newServer(t, "")
	_, userToken := mustCreateUser(t, s.store, "alice")
	for name, authz := range map[string]string{
		"NoHeader":      "",
		"BearerEmpty":   "Bearer ",
		"UserToken":     "Bearer " + userToken,
		"OldAdminToken": "Bearer " + testAdminToken,
		"Unknown":       "Bearer nope",
	} {
		t.Run(name, func(t *testing.T) {
			wantProblem(t, s.do(t, http.MethodGet, "/v1/probe/admin", authz, ""), 403, "forbidden")
		})
	}
	// The user routes still work.
	if r := s.do(t, http.MethodGet, "/v1/probe/user", "Bearer "+userToken, ""); r.status != http.StatusOK {
		t.Errorf("user route with admin disabled = %d %s, want 200", r.status, r.raw)
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	s := newServer(t, testAdminToken)

	r := s.do(t, http.MethodPost, "/v1/users", "", `{"name":"alice"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("POST /v1/users = %d %s, want 201", r.status, r.raw)
	}
	id, _ := r.body["id"].(string)
	token, _ := r.body["token"].(string)
	if id == "" || r.body["name"] != "alice" || !strings.HasPrefix(token, "shop_") || len(r.body) != 3 {
		t.Fatalf("POST /v1/users body = %s, want exactly id, name and a shop_ token", r.raw)
	}

	me := s.do(t, http.MethodGet, "/v1/me", "Bearer "+token, "")
	if me.status != http.StatusOK {
		t.Fatalf("GET /v1/me = %d %s, want 200", me.status, me.raw)
	}
	if me.body["id"] != id || me.body["name"] != "alice" || len(me.body) != 2 {
		t.Errorf("GET /v1/me body = %s, want exactly id %s and name alice (the token is shown once)", me.raw, id)
	}

	wantProblem(t, s.do(t, http.MethodGet, "/v1/me", "", ""), 401, "unauthenticated")
	wantProblem(t, s.do(t, http.MethodGet, "/v1/me", "Bearer shop_nope", ""), 401, "unauthenticated")

	for name, body := range map[string]string{
		"EmptyBody":    "",
		"EmptyName":    `{"name":""}`,
		"LongName":     `{"name":"` + strings.Repeat("x", 101) + `"}`,
		"ControlChar":  `{"name":"a\u0007b"}`,
		"UnknownField": `{"name":"bob","admin":true}`,
		"CaseVariant":  `{"Name":"bob"}`,
		"Duplicate":    `{"name":"bob","name":"admin"}`,
		"WrongType":    `{"name":7}`,
		"Malformed":    `{"name":`,
	} {
		t.Run("Invalid/"+name, func(t *testing.T) {
			r := s.do(t, http.MethodPost, "/v1/users", "", body)
			wantProblem(t, r, 400, "invalid_request")
			if _, ok := r.body["token"]; ok {
				t.Errorf("refusal carries a token: %s", r.raw)
			}
		})
	}
}

// A header that cannot hold a token is refused before the database is
// asked: with the database down, those still get 401 while a well-formed
// token gets 500.
func TestMiddleware_MalformedTokenSkipsDatabase(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	store := NewStore(pool)
	mw := NewMiddleware(store, testAdminToken)
	e := httpx.New(metrics.New(), httpx.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ok := func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }
	e.GET("/user", ok, mw.User)
	e.GET("/admin", ok, mw.Admin)
	s := &server{e: e, store: store}
	pool.Close()

	long := "Bearer " + strings.Repeat("a", 257)
	for _, path := range []string{"/user", "/admin"} {
		wantProblem(t, s.do(t, http.MethodGet, path, long, ""), 401, "unauthenticated")
		wantProblem(t, s.do(t, http.MethodGet, path, "Basic abc", ""), 401, "unauthenticated")
		if r := s.do(t, http.MethodGet, path, "Bearer "+strings.Repeat("a", 256), ""); r.status != http.StatusInternalServerError {
			t.Errorf("GET %s with a well-formed token and the database down = %d, want 500", path, r.status)
		}
	}
}
